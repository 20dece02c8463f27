"""The files that ship Arbiter: Dockerfile, docker-compose.yml and the examples.

Linting and schema checks run the real tools (hadolint, check-jsonschema with its
bundled compose-spec schema) from the development environment; the structural tests
pin down the promises the README makes about the deployment (non-root, health checks,
migrations before the API, CPU-only torch pinned by constraints.txt). The examples are
generated files: they must validate and be exactly what the generator writes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from app.cli import build_parser
from policies.dispatch.model import DispatchSnapshot, dispatch_problems
from policies.model import Snapshot, convert, decode_snapshot, snapshot_problems

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
EXAMPLES = ROOT / "examples"
# Run as a module from the repository root, as `make examples` does.
GENERATOR = ("-m", "evidence.generate_examples")
GENERATED = ("small.json", "large.json", "decision-request.json", "reclaim.json")

Instruction = tuple[str, str]  # (keyword in upper case, arguments)


def dev_tool(name: str) -> str:
    """Path of a tool from the dev extra: next to this interpreter first, then on PATH."""
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    found = shutil.which(name, path=search)
    if found is None:
        pytest.fail(f"{name} not found; install the dev extra (pip install -e '.[dev]')")
    return found


def dockerfile_instructions(text: str) -> list[Instruction]:
    """Instructions of a Dockerfile, continuation lines joined and comments dropped."""
    instructions: list[Instruction] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue  # a comment inside a continued instruction
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        full = (pending + line).strip()
        pending = ""
        keyword, _, arguments = full.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    return instructions


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    """Instructions split by FROM; each stage starts with its FROM."""
    out: list[list[Instruction]] = []
    for instruction in instructions:
        if instruction[0] == "FROM":
            out.append([])
        if out:
            out[-1].append(instruction)
    return out


def build_args(instructions: list[Instruction]) -> dict[str, str]:
    """Defaults of every ARG, wherever it is declared."""
    found: dict[str, str] = {}
    for keyword, arguments in instructions:
        if keyword == "ARG" and "=" in arguments:
            name, _, default = arguments.partition("=")
            found[name.strip()] = default.strip().strip('"')
    return found


@pytest.fixture(scope="module")
def instructions() -> list[Instruction]:
    return dockerfile_instructions(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def runtime_stage(instructions: list[Instruction]) -> list[Instruction]:
    all_stages = stages(instructions)
    assert len(all_stages) >= 2, "the Dockerfile should be multi-stage"
    return all_stages[-1]


@pytest.fixture(scope="module")
def compose() -> dict[str, object]:
    loaded = YAML(typ="safe", pure=True).load(COMPOSE.read_text(encoding="utf-8"))
    assert isinstance(loaded, dict)
    return loaded


def services(compose: dict[str, object]) -> dict[str, dict[str, object]]:
    found = compose["services"]
    assert isinstance(found, dict)
    return found


def depends_on(service: dict[str, object]) -> dict[str, str]:
    """Dependency → condition (the long syntax; the short one means service_started)."""
    raw = service.get("depends_on", {})
    if isinstance(raw, list):
        return dict.fromkeys(raw, "service_started")
    assert isinstance(raw, dict)
    return {name: str(spec.get("condition", "service_started")) for name, spec in raw.items()}


def has_healthcheck(service: dict[str, object]) -> bool:
    check = service.get("healthcheck")
    return isinstance(check, dict) and not check.get("disable", False) and "test" in check


def healthcheck_command(service: dict[str, object]) -> str:
    """The health check's test as one string (either compose syntax)."""
    check = service.get("healthcheck")
    assert isinstance(check, dict)
    test = check["test"]
    return " ".join(test) if isinstance(test, list) else str(test)


# -- Dockerfile --------------------------------------------------------------------------


def test_dockerfile_passes_hadolint_without_findings() -> None:
    completed = subprocess.run(
        [dev_tool("hadolint"), "--format", "json", "--failure-threshold", "style", "Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    findings = json.loads(completed.stdout or "[]")
    assert findings == [], json.dumps(findings, indent=1)
    assert completed.returncode == 0, completed.stderr


def test_runtime_stage_runs_as_a_non_root_user(runtime_stage: list[Instruction]) -> None:
    users = [arguments for keyword, arguments in runtime_stage if keyword == "USER"]
    assert users, "the runtime stage sets no USER, so it runs as root"
    user = users[-1].split(":")[0]
    assert user not in {"root", "0"}


def test_runtime_stage_copies_only_the_virtualenv_from_the_builder(
    runtime_stage: list[Instruction],
) -> None:
    copies = [arguments for keyword, arguments in runtime_stage if keyword in {"COPY", "ADD"}]
    assert copies == ["--from=builder /opt/venv /opt/venv"]


def test_image_has_a_healthcheck_on_healthz_without_curl(runtime_stage: list[Instruction]) -> None:
    checks = [arguments for keyword, arguments in runtime_stage if keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    assert "/healthz" in checks[0]
    assert "urllib" in checks[0]
    assert "curl" not in checks[0]


def test_image_serves_on_port_8000_on_all_interfaces(runtime_stage: list[Instruction]) -> None:
    assert ("EXPOSE", "8000") in runtime_stage
    commands = [arguments for keyword, arguments in runtime_stage if keyword == "CMD"]
    assert json.loads(commands[-1]) == ["arbiter", "serve", "--host", "0.0.0.0", "--port", "8000"]


def test_image_defaults_to_sqlite_in_its_data_volume(runtime_stage: list[Instruction]) -> None:
    env = " ".join(arguments for keyword, arguments in runtime_stage if keyword == "ENV")
    volumes = [arguments for keyword, arguments in runtime_stage if keyword == "VOLUME"]
    match = re.search(r"ARBITER_DATABASE_URL=sqlite:///(\S+)", env)
    assert match is not None
    database = Path(match.group(1))
    assert volumes
    assert any(str(database).startswith(v) for v in json.loads(volumes[-1]))


def test_base_images_are_pinned_by_tag(instructions: list[Instruction]) -> None:
    args = build_args(instructions)
    bases = [arguments.split()[0] for keyword, arguments in instructions if keyword == "FROM"]
    for base in bases:
        image = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), base)
        if image == "builder":  # a stage built from an earlier one
            continue
        name, _, tag = image.partition(":")
        assert name, image
        assert tag, f"{image}: no tag"
        assert tag != "latest", image
        assert tag.startswith("3.11"), f"{image}: the project targets Python 3.11"


def test_builder_compiles_on_the_full_image_of_the_runtimes_python_and_debian(
    instructions: list[Instruction],
) -> None:
    """The C extension is compiled in the builder, whose virtual environment the runtime
    copies: the builder needs a compiler (the full image, not the slim one) and must be
    the runtime's Python and Debian release, or the copied environment would not run."""
    args = build_args(instructions)
    builder, runtime = args["BUILDER_IMAGE"], args["PYTHON_IMAGE"]
    assert "slim" not in builder, builder
    assert runtime.replace("-slim", "") == builder, (builder, runtime)
    froms = [arguments for keyword, arguments in instructions if keyword == "FROM"]
    assert froms[0] == "${BUILDER_IMAGE} AS builder"


def test_torch_is_pinned_by_constraints_and_installed_cpu_only(
    instructions: list[Instruction],
) -> None:
    constraints = (ROOT / "constraints.txt").read_text(encoding="utf-8")
    pinned = re.search(r"^torch==(\S+)$", constraints, flags=re.MULTILINE)
    assert pinned is not None, "constraints.txt must pin torch"
    assert build_args(instructions).get("TORCH_VERSION") == pinned.group(1)
    runs = [arguments for keyword, arguments in instructions if keyword == "RUN"]
    torch_install = [r for r in runs if '"torch==${TORCH_VERSION}"' in r]
    assert torch_install
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_install[0]
    assert any("pip install" in r and "-c constraints.txt ." in r for r in runs)


def test_dockerignore_keeps_local_state_out_of_the_build_context() -> None:
    lines = (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
    assert "*" in lines, "the context should be an allow-list"
    allowed = {line[1:].rstrip("/") for line in lines if line.startswith("!")}
    assert {"pyproject.toml", "constraints.txt", "app", "policies", "storage"} <= allowed
    assert not allowed & {".venv", "var", "examples", ".git", "tests"}


# -- docker-compose.yml ----------------------------------------------------------------------


def test_compose_file_matches_the_compose_spec_schema() -> None:
    completed = subprocess.run(
        [
            dev_tool("check-jsonschema"),
            "--builtin-schema",
            "vendor.compose-spec",
            "docker-compose.yml",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr


def test_compose_has_no_obsolete_version_key(compose: dict[str, object]) -> None:
    assert "version" not in compose


def test_every_service_has_a_healthcheck_or_waits_for_a_healthy_dependency(
    compose: dict[str, object],
) -> None:
    waiting = {"service_healthy", "service_completed_successfully"}
    for name, service in services(compose).items():
        conditions = set(depends_on(service).values())
        assert has_healthcheck(service) or conditions & waiting, name


def test_api_starts_after_migrations_completed_and_redis_is_healthy(
    compose: dict[str, object],
) -> None:
    all_services = services(compose)
    assert depends_on(all_services["api"]) == {
        "migrate": "service_completed_successfully",
        "redis": "service_healthy",
    }
    migrate = all_services["migrate"]
    assert migrate["command"] == ["arbiter", "db", "upgrade"]
    assert migrate["restart"] == "no"
    assert depends_on(migrate) == {"postgres": "service_healthy"}


def test_worker_serves_the_retrain_queue_once_migrated_with_the_shared_data(
    compose: dict[str, object],
) -> None:
    worker = services(compose)["worker"]
    assert worker["command"] == ["arbiter", "worker"]
    assert depends_on(worker) == {
        "migrate": "service_completed_successfully",
        "redis": "service_healthy",
    }
    environment = worker["environment"]
    assert isinstance(environment, dict)
    volumes = worker["volumes"]
    assert isinstance(volumes, list)
    assert any(v.endswith(f":{environment['ARBITER_SHARED_DIR']}:ro") for v in volumes)


def test_every_compose_command_is_a_real_arbiter_command(compose: dict[str, object]) -> None:
    parser = build_parser()
    checked = []
    for name, service in services(compose).items():
        command = service.get("command")
        if isinstance(command, list) and command[:1] == ["arbiter"]:
            parser.parse_args(command[1:])  # exits (fails the test) on an unknown command
            checked.append(name)
    assert checked, "no service runs an arbiter command: nothing was checked"


def test_api_healthcheck_probes_readiness(compose: dict[str, object]) -> None:
    api = services(compose)["api"]
    assert has_healthcheck(api)
    assert "/readyz" in healthcheck_command(api)


def test_backing_services_are_pinned_and_checked(compose: dict[str, object]) -> None:
    all_services = services(compose)
    assert all_services["postgres"]["image"] == "postgres:16"
    assert all_services["redis"]["image"] == "redis:7"
    assert "pg_isready" in healthcheck_command(all_services["postgres"])
    assert "redis-cli ping" in healthcheck_command(all_services["redis"])


def test_compose_takes_credentials_from_the_environment(compose: dict[str, object]) -> None:
    for name in ("api", "migrate", "worker"):
        env = services(compose)[name]["environment"]
        assert isinstance(env, dict)
        assert env["ARBITER_DATABASE_URL"].startswith("postgresql://arbiter:${POSTGRES_PASSWORD")
        assert env["ARBITER_DATABASE_URL"].endswith("@postgres:5432/arbiter")
        assert env["ARBITER_REDIS_URL"] == "redis://redis:6379/0"
        assert env["ARBITER_ADMIN_TOKEN"].startswith("${ARBITER_ADMIN_TOKEN")
    postgres_env = services(compose)["postgres"]["environment"]
    assert isinstance(postgres_env, dict)
    assert postgres_env["POSTGRES_PASSWORD"].startswith("${POSTGRES_PASSWORD")


# -- examples ------------------------------------------------------------------------------


def example_snapshot(path: Path) -> dict[str, object] | None:
    """The snapshot a file in examples/ holds (bare or as a request's `snapshot`), if any."""
    loaded = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(loaded, dict):
        return None
    if isinstance(loaded.get("snapshot"), dict):
        inner: dict[str, object] = loaded["snapshot"]
        return inner
    if "nodes" in loaded or "jobs" in loaded:
        return loaded
    return None


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.json")))
def test_example_snapshot_validates_without_problems(name: str) -> None:
    snapshot = example_snapshot(EXAMPLES / name)
    if snapshot is None:
        pytest.skip(f"{name} holds no snapshot")
    if "dram_bandwidth_gbps" in snapshot:  # an accelerator system, for POST /v1/dispatch
        assert dispatch_problems(convert(snapshot, DispatchSnapshot)) == []
        return
    problems = snapshot_problems(convert(snapshot, Snapshot))
    assert problems == []


def test_the_dispatch_example_is_what_its_generator_writes() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "evidence.generate_dispatch_example", "--check"],
        cwd=ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


def test_generator_reproduces_the_committed_examples_byte_for_byte(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, *GENERATOR, "--out", str(tmp_path)],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    for name in GENERATED:
        committed = (EXAMPLES / name).read_bytes()
        assert (tmp_path / name).read_bytes() == committed, (
            f"examples/{name} is stale: run make examples"
        )


def test_generator_gives_valid_snapshots_for_another_seed(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, *GENERATOR, "--out", str(tmp_path), "--seed", "7"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=120,
    )
    for name in ("small.json", "large.json"):
        text = (tmp_path / name).read_text(encoding="utf-8")
        assert text != (EXAMPLES / name).read_text(encoding="utf-8")
        assert snapshot_problems(decode_snapshot(text)) == []
    reclaim = json.loads((tmp_path / "reclaim.json").read_text(encoding="utf-8"))
    assert snapshot_problems(convert(reclaim["snapshot"], Snapshot)) == []


def test_examples_have_the_sizes_the_benchmarks_assume() -> None:
    small = decode_snapshot((EXAMPLES / "small.json").read_bytes())
    large = decode_snapshot((EXAMPLES / "large.json").read_bytes())

    assert len(small.nodes) == 16
    assert len({n.topology.rack for n in small.nodes}) == 2
    assert {n.gpu_type for n in small.nodes} == {"V100", "P100"}
    assert len(small.jobs) == 50
    assert {j.state.value for j in small.jobs} == {"running", "pending", "suspended"}
    assert len(small.tenants) == 3
    assert sum(t.gpu_quota is not None for t in small.tenants) == 1
    assert {j.scaling_rule.value for j in small.jobs if j.elastic} == {"linear", "power_of_two"}

    assert len(large.nodes) == 512
    assert {n.gpus for n in large.nodes} == {8}
    assert len(large.jobs) == 2000

    # Posted bodies are compact JSON; DESIGN §8 measured about 14 KB and 556 KB.
    def compact_kb(path: Path) -> float:
        loaded = json.loads(path.read_text(encoding="utf-8"))
        return len(json.dumps(loaded, separators=(",", ":"))) / 1024

    assert 10 <= compact_kb(EXAMPLES / "small.json") <= 20
    assert 450 <= compact_kb(EXAMPLES / "large.json") <= 650


def test_reclaim_example_asks_aryl_for_two_of_the_loaned_servers() -> None:
    request = json.loads((EXAMPLES / "reclaim.json").read_text(encoding="utf-8"))
    snapshot = convert(request["snapshot"], Snapshot)
    loaned = [n.id for n in snapshot.nodes if n.loaned]
    on = {
        node_id: [j for j in snapshot.jobs for a in j.placement if a.node_id == node_id]
        for node_id in loaned
    }

    assert (request["profile"], request["count"]) == ("aryl", 2)
    assert len(loaned) == 3
    # Elastic jobs' extra workers on one loaned server, rigid jobs on another.
    assert any(jobs and all(j.elastic for j in jobs) for jobs in on.values())
    assert any(jobs and not any(j.elastic for j in jobs) for jobs in on.values())


def test_decision_request_example_posts_the_small_snapshot_under_tiresias() -> None:
    request = json.loads((EXAMPLES / "decision-request.json").read_text(encoding="utf-8"))
    small = json.loads((EXAMPLES / "small.json").read_text(encoding="utf-8"))
    assert request == {"profile": "tiresias", "snapshot": small}
