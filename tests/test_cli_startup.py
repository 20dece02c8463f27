"""`arbiter --help` stays instant: the parser is built without importing any heavy module.

Each check runs in a fresh interpreter (this one has imported everything already) and
looks at `sys.modules` afterwards: a behaviour, not a timing, so it holds on any machine.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from app.cli import build_parser, main

ROOT = Path(__file__).resolve().parents[1]
HEAVY = frozenset({"torch", "matplotlib", "numpy", "sqlalchemy", "fastapi"})


def modules_after(code: str) -> set[str]:
    """Top-level names of the modules a fresh interpreter has loaded after running `code`."""
    probe = (
        "import contextlib, io, json, sys\n"
        "with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):\n"
        + "".join(f"    {line}\n" for line in code.splitlines())
        + "print(json.dumps(sorted({name.partition('.')[0] for name in sys.modules})))\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return set(json.loads(completed.stdout))


def test_building_the_parser_imports_no_heavy_module() -> None:
    loaded = modules_after("import app.cli\napp.cli.build_parser()")
    assert not loaded & HEAVY


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["serve", "--help"], ["db", "upgrade", "--help"], ["worker", "--help"]],
    ids=" ".join,
)
def test_help_imports_no_heavy_module(argv: list[str]) -> None:
    loaded = modules_after(f"import app.cli\napp.cli.main({argv!r})")
    assert not loaded & HEAVY


def test_simulate_help_does_not_import_the_engine_or_the_service() -> None:
    # Its options need the simulator's workload choices, which bring numpy; the engine
    # (torch), the report (matplotlib) and the service stay out until a simulation runs.
    loaded = modules_after("import app.cli\napp.cli.main(['simulate', '--help'])")
    assert not loaded & (HEAVY - {"numpy"})


def test_lazily_declared_verbs_parse_their_options() -> None:
    parser = build_parser()
    simulate = parser.parse_args(
        ["simulate", "--trace", "t.csv", "--cluster", "c.json", "--profile", "fifo",
         "--profile", "oasis", "--utility", "step"]
    )  # fmt: skip
    assert (simulate.profile, simulate.utility, simulate.handler.__name__) == (
        ["fifo", "oasis"],
        "step",
        "run_simulate",
    )
    worker = parser.parse_args(["worker", "--burst"])
    assert worker.burst
    assert worker.handler.__name__ == "run_worker"
    train = parser.parse_args(["train", "dl2", "--updates", "3"])
    assert (train.policy, train.updates, train.handler.__name__) == ("dl2", 3, "run_train")


def test_verb_help_lists_its_lazily_declared_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    help_text = capsys.readouterr().out
    assert "--trace" in help_text
    assert "--perf-model" in help_text


@pytest.mark.parametrize("workers", ["0", "-2", "two"])
def test_serve_refuses_a_worker_count_below_one_or_not_a_number(
    workers: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", "--workers", workers])
    assert exited.value.code == 2
    assert "--workers" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["99999", "-1", "eighty"])
def test_serve_refuses_a_port_outside_the_tcp_range(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(["serve", "--port", port])
    assert exited.value.code == 2
    assert "argument --port" in capsys.readouterr().err


@pytest.mark.parametrize(
    "case",
    [
        ("ARBITER_DATABASE_URL", "garbage", "ARBITER_DATABASE_URL: not a database URL: 'garbage'"),
        (
            "ARBITER_DATABASE_URL",
            "foo://x",
            "ARBITER_DATABASE_URL: no database driver for 'foo' (sqlite or postgresql)",
        ),
        (
            "ARBITER_REDIS_URL",
            "localhost:6379",
            "ARBITER_REDIS_URL: must start with redis://, rediss://, unix://",
        ),
        ("ARBITER_LOG_BUFFER", "0", "ARBITER_LOG_BUFFER: Input should be greater than or equal"),
        ("ARBITER_STATE_TTL_S", "-5", "ARBITER_STATE_TTL_S must be a number of seconds"),
    ],
)
@pytest.mark.parametrize("verb", [["serve"], ["db", "upgrade"], ["openapi"]])
def test_a_setting_that_cannot_be_used_stops_the_verb_naming_the_variable(
    verb: list[str],
    case: tuple[str, str, str],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Before anything starts: no server, no connection, no traceback.
    variable, value, says = case
    monkeypatch.setenv(variable, value)

    assert main(verb) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"arbiter {verb[0]}: error: ")
    assert says in error
    assert "Traceback" not in error


def test_every_wrong_setting_is_named_in_one_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ARBITER_DATABASE_URL", "garbage")
    monkeypatch.setenv("ARBITER_MAX_JOBS", "many")

    assert main(["openapi"]) == 2
    error = capsys.readouterr().err
    assert "ARBITER_DATABASE_URL: not a database URL" in error
    assert "ARBITER_MAX_JOBS: Input should be a valid integer" in error
