"""Memory benchmarks: the service under a long run of decisions, and one simulation's peak.

    .venv/bin/python -m evidence.bench_memory                          # both, full size (long)
    .venv/bin/python -m evidence.bench_memory service --requests 200   # a quick look
    .venv/bin/python -m evidence.bench_memory simulator --max-jobs 500

`service`: starts `arbiter serve` (one worker, `python -m app.cli` from this checkout)
on embedded defaults, as `scripts/serve_and_bench.sh` does: a throwaway SQLite file and
spill directory in a temporary folder, the in-process cache, no other `ARBITER_*`
setting (but `BENCH_ARBITER_X=v` gives the service `ARBITER_X=v`, e.g.
`BENCH_ARBITER_DECISION_THREADS=1`), a free loopback port; waits for `GET /readyz`; then
posts `examples/large.json` to `POST /v1/decisions` (profile `tiresias` unless
`--profile`) `--requests` times (default 10,000), one at a time over one keep-alive
connection, and reads the server process's resident memory (`VmRSS` in
`/proc/PID/status`) after the first 100 responses, every `--sample-every` responses, at
the end, and again after two idle seconds. Target: the memory at the end within 10 % of
that after 100 decisions (no growth with the number of decisions served, decision log
included).

`simulator`: runs `arbiter simulate` on Philly's two-week trace (`--trace`,
`--cluster`, default `shared/traces/philly.2w-2017-10-02.csv` on
`shared/clusters/philly.json`, profile `fifo`, ideal performance model, `--json`) as a
child process, optionally on its first `--max-jobs` jobs, and reports its peak resident
memory (`ru_maxrss` from `os.wait4` on that child alone). Target: under 1 GiB.

With no subcommand both run, each with its defaults (`--requests`, `--max-jobs` and the
other options belong to the subcommands). `--json PATH` (before the subcommand) writes
the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx

from evidence.runner import (
    EXAMPLES,
    ROOT,
    add_json,
    add_quiet,
    command_line,
    progress,
    wait_until_ready,
    write_json,
)
from simulator.paths import shared_dir

BASELINE_REQUESTS = 100
SERVICE_GROWTH_LIMIT = 0.10  # end within 10 % of the memory after the first 100 decisions
SIMULATOR_LIMIT_BYTES = 1 << 30
KIB = 1024
MIB = 1 << 20


# -- the service ----------------------------------------------------------------------------------
def rss_bytes(pid: int) -> int:
    """Resident memory of process `pid` (`VmRSS` of `/proc/PID/status`)."""
    for line in Path(f"/proc/{pid}/status").read_text(encoding="ascii").splitlines():
        if line.startswith("VmRSS:"):
            value, unit = line.split()[1:3]
            if unit != "kB":
                raise ValueError(f"unexpected VmRSS unit {unit!r}")
            return int(value) * KIB
    raise ValueError(f"no VmRSS for process {pid} (a zombie?)")


def free_loopback_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def embedded_env(workdir: Path) -> dict[str, str]:
    """This environment without any `ARBITER_*` setting but a throwaway database and spill dir."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ARBITER_")}
    env["ARBITER_DATABASE_URL"] = f"sqlite:///{workdir / 'arbiter.db'}"
    env["ARBITER_SPILL_DIR"] = str(workdir / "spill")
    env.update(
        {k[len("BENCH_") :]: v for k, v in os.environ.items() if k.startswith("BENCH_ARBITER_")}
    )
    return env


@contextmanager
def running_service(ready_timeout_s: float) -> Iterator[tuple[str, int]]:
    """(base URL, PID) of `arbiter serve` on embedded defaults; stopped on exit whatever happens."""
    workdir = Path(tempfile.mkdtemp(prefix="arbiter-memory."))
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    log_path = workdir / "server.log"
    command = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "warning"]
    with log_path.open("wb") as log:
        server = subprocess.Popen(
            command,
            cwd=ROOT,
            env=embedded_env(workdir),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until_ready(url, server, log_path, ready_timeout_s)
        yield url, server.pid
    finally:
        if server.poll() is None:
            server.terminate()
            try:
                server.wait(timeout=15)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        shutil.rmtree(workdir, ignore_errors=True)


@dataclass
class ServiceMemory:
    profile: str
    snapshot: str
    requests: int
    errors: int = 0
    wall_s: float = 0.0
    # (responses so far, resident bytes), in order; the last is the end of the run.
    samples: list[tuple[int, int]] = field(default_factory=list)
    idle_rss_bytes: int = 0  # two seconds after the last response

    @property
    def baseline_bytes(self) -> int:
        """Resident memory after the first 100 responses (after the first if fewer ran)."""
        at_or_after = [rss for count, rss in self.samples if count >= BASELINE_REQUESTS]
        return at_or_after[0] if at_or_after else self.samples[0][1]

    @property
    def end_bytes(self) -> int:
        return self.samples[-1][1]

    @property
    def ratio(self) -> float:
        return self.end_bytes / self.baseline_bytes


def sample_points(requests: int, every: int) -> list[int]:
    """Response counts at which to read the memory: 1, 100, every `every`, the last."""
    points = {1, min(BASELINE_REQUESTS, requests), requests}
    points.update(range(every, requests, every))
    return sorted(point for point in points if 1 <= point <= requests)


def measure_service(
    *,
    profile: str,
    snapshot: Path,
    requests: int,
    sample_every: int,
    ready_timeout_s: float,
    progress: Callable[[str], None],
) -> ServiceMemory:
    raw = snapshot.read_bytes().strip()
    body = b'{"profile":' + json.dumps(profile).encode() + b',"snapshot":' + raw + b"}"
    result = ServiceMemory(profile=profile, snapshot=snapshot.name, requests=requests)
    points = set(sample_points(requests, sample_every))
    with running_service(ready_timeout_s) as (url, pid):
        progress(f"serving on {url} (pid {pid}); {requests:,} decisions of {snapshot.name}")
        headers = {"content-type": "application/json"}
        started = time.perf_counter()
        with httpx.Client(base_url=url, timeout=120.0) as client:
            for count in range(1, requests + 1):
                response = client.post("/v1/decisions", content=body, headers=headers)
                if response.status_code != 200:
                    result.errors += 1
                    if count == 1:
                        raise SystemExit(
                            f"first decision failed: HTTP {response.status_code}: "
                            f"{response.text[:300]}"
                        )
                if count in points:
                    result.samples.append((count, rss_bytes(pid)))
                    progress(f"{count:>7,} decisions: VmRSS {result.samples[-1][1] / MIB:,.1f} MiB")
        result.wall_s = time.perf_counter() - started
        time.sleep(2.0)
        result.idle_rss_bytes = rss_bytes(pid)
    return result


def render_service(result: ServiceMemory) -> str:
    verdict = "met" if result.ratio <= 1 + SERVICE_GROWTH_LIMIT else "not met"
    lines = [
        f"### Service memory: {result.requests:,} decisions of `{result.snapshot}`, "
        f"profile `{result.profile}`",
        "",
        f"{result.requests:,} requests in {result.wall_s:,.0f} s "
        f"({result.requests / result.wall_s:,.1f}/s), {result.errors} error(s).",
        "",
        "| decisions served | VmRSS (MiB) |",
        "|---:|---:|",
        *(f"| {count:,} | {rss / MIB:,.1f} |" for count, rss in result.samples),
        f"| (2 s idle after the last) | {result.idle_rss_bytes / MIB:,.1f} |",
        "",
        f"After {min(BASELINE_REQUESTS, result.requests):,}: "
        f"{result.baseline_bytes / MIB:,.1f} MiB; at the end: {result.end_bytes / MIB:,.1f} MiB; "
        f"ratio {result.ratio:.3f} (target ≤ {1 + SERVICE_GROWTH_LIMIT:.2f}: {verdict}).",
    ]
    return "\n".join(lines)


# -- the simulator --------------------------------------------------------------------------------
@dataclass
class SimulatorMemory:
    command: list[str]
    exit_code: int
    peak_rss_bytes: int
    wall_s: float
    jobs: int | None = None  # from the `--json` output, when it parses

    @property
    def met(self) -> bool:
        return self.exit_code == 0 and self.peak_rss_bytes < SIMULATOR_LIMIT_BYTES


def measure_simulator(
    *,
    trace: Path,
    cluster: Path,
    profile: str,
    perf_model: str,
    max_jobs: int | None,
    progress: Callable[[str], None],
) -> SimulatorMemory:
    command = [sys.executable, "-m", "app.cli", "simulate", "--trace", str(trace)]
    command += ["--cluster", str(cluster), "--profile", profile, "--perf-model", perf_model]
    command += ["--json"]
    if max_jobs is not None:
        command += ["--max-jobs", str(max_jobs)]
    progress("running " + " ".join(command))
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        child = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err)
        # wait4 gives this child's own resource usage (its peak resident set, in KiB on
        # Linux), where RUSAGE_CHILDREN would be the largest of every child so far.
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - started
        child.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    result = SimulatorMemory(
        command=command,
        exit_code=child.returncode,
        peak_rss_bytes=usage.ru_maxrss * KIB,
        wall_s=wall,
    )
    if result.exit_code != 0:
        progress(f"simulate exited with {result.exit_code}: {stderr.decode(errors='replace')}")
    try:
        jobs = sum(int(row["jobs"]) for row in json.loads(stdout)["results"])
    except (ValueError, KeyError, TypeError):
        jobs = None
    result.jobs = jobs
    return result


def render_simulator(result: SimulatorMemory) -> str:
    jobs = f"{result.jobs:,} jobs" if result.jobs is not None else "jobs unknown"
    verdict = "met" if result.met else "not met"
    shown = " ".join(["python", *result.command[1:]])
    return "\n".join(
        [
            "### Simulator memory",
            "",
            f"`{shown}`",
            "",
            f"Exit code {result.exit_code}, {jobs}, {result.wall_s:,.1f} s; peak resident "
            f"memory {result.peak_rss_bytes / MIB:,.1f} MiB (target < 1 GiB: {verdict}).",
        ]
    )


# -- command line ---------------------------------------------------------------------------------
def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1: {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = command_line(__doc__)
    add_json(parser)
    add_quiet(parser)
    parts = parser.add_subparsers(dest="part")
    service = parts.add_parser("service", help="the service's memory over many decisions")
    service.add_argument("--requests", type=positive, default=10_000)
    service.add_argument("--profile", default="tiresias")
    service.add_argument("--snapshot", type=Path, default=EXAMPLES / "large.json")
    service.add_argument("--sample-every", type=positive, default=1_000)
    service.add_argument("--ready-timeout-s", type=float, default=60.0)
    simulator = parts.add_parser("simulator", help="one simulation's peak memory")
    simulator.add_argument("--trace", type=Path, default=None)
    simulator.add_argument("--cluster", type=Path, default=None)
    simulator.add_argument("--profile", default="fifo")
    simulator.add_argument("--perf-model", default="ideal", choices=("ideal", "measured"))
    simulator.add_argument("--max-jobs", type=positive, default=None)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    if args.part is None:
        # Both parts, each with its subcommand's defaults.
        parts = {part: parser.parse_args([*given, part]) for part in ("service", "simulator")}
    else:
        parts = {args.part: args}

    say = progress(args.quiet)
    figures: dict[str, object] = {}
    sections: list[str] = []
    ok = True
    if "service" in parts:
        options = parts["service"]
        service = measure_service(
            profile=options.profile,
            snapshot=options.snapshot,
            requests=options.requests,
            sample_every=options.sample_every,
            ready_timeout_s=options.ready_timeout_s,
            progress=say,
        )
        sections.append(render_service(service))
        figures["service"] = {**asdict(service), "ratio": service.ratio}
        ok = ok and service.errors == 0
    if "simulator" in parts:
        options = parts["simulator"]
        shared = shared_dir()
        simulator = measure_simulator(
            trace=options.trace or shared / "traces" / "philly.2w-2017-10-02.csv",
            cluster=options.cluster or shared / "clusters" / "philly.json",
            profile=options.profile,
            perf_model=options.perf_model,
            max_jobs=options.max_jobs,
            progress=say,
        )
        sections.append(render_simulator(simulator))
        figures["simulator"] = asdict(simulator)
        ok = ok and simulator.exit_code == 0
    print("\n\n".join(sections))
    if args.json is not None:
        write_json(args.json, figures)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
