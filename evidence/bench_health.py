"""Health while decisions run: `GET /healthz` latency while slow decisions are posted.

    .venv/bin/python -m evidence.bench_health                  # or: make bench-health
    .venv/bin/python -m evidence.bench_health --duration-s 30 --decision-threads 1
    .venv/bin/python -m evidence.bench_health --url http://127.0.0.1:8000   # a running service

Starts Arbiter as `scripts/serve_and_bench.sh` does (`python -m app.cli serve`, one
uvicorn worker, on a free loopback port with the embedded defaults: a throwaway SQLite
file in a temporary directory and the in-process cache), waits for `GET /readyz`, and
stops it at the end, whatever happens; `--url` measures a running service instead. One
client thread posts `oasis` decisions on `examples/large.json` (a few hundred ms each)
back to back while another sends `GET /healthz` every `--interval-ms` for `--duration-s`
seconds. Prints the health probes' p50 / p99 / max latency and how many decisions were
done, as a Markdown table (`--json` prints the figures as JSON instead). For a service
started here it also gives the serving process's minor page faults and system CPU time
per decision over the same window (from `/proc`, Linux only): what memory mapped afresh
costs each decision (`ARBITER_MALLOC_HEAP_BLOCK_MB`, docs/benchmarks.md).

With decisions on the event loop, a probe waits for the decision in progress to finish;
with them on decision threads (:mod:`app.threads`), only for the interpreter to switch
threads. Client and service share the machine, which the figures
include. Only loopback URLs are accepted: this is a local measurement tool.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
import orjson

from evidence.bench import is_loopback
from evidence.runner import EXAMPLES, ROOT, percentile, wait_until_ready

READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Figures:
    """What one run measured; latencies in milliseconds."""

    url: str
    profile: str
    snapshot: str
    duration_s: float
    decision_threads: str
    health_requests: int
    health_errors: int
    health_p50_ms: float
    health_p99_ms: float
    health_max_ms: float
    decisions: int
    decision_errors: int
    decision_p50_ms: float | None
    server_faults_per_decision: float | None = None
    server_system_ms_per_decision: float | None = None


@dataclass
class Samples:
    """Latencies (seconds) of the requests that succeeded, and how many failed."""

    latencies: list[float] = field(default_factory=list)
    errors: int = 0

    def add(self, ok: bool, took_s: float) -> None:
        if ok:
            self.latencies.append(took_s)
        else:
            self.errors += 1


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextlib.contextmanager
def embedded_service(decision_threads: int | None) -> Iterator[tuple[str, int | None]]:
    """`arbiter serve` on embedded defaults on a free loopback port; yields its base URL
    and process id."""
    with tempfile.TemporaryDirectory(prefix="arbiter-bench-health.") as workdir:
        port = free_port()
        env = {k: v for k, v in os.environ.items() if k != "ARBITER_REDIS_URL"}
        env["ARBITER_DATABASE_URL"] = f"sqlite:///{workdir}/arbiter.db"
        env["ARBITER_SPILL_DIR"] = f"{workdir}/spill"
        if decision_threads is not None:
            env["ARBITER_DECISION_THREADS"] = str(decision_threads)
        log_path = Path(workdir) / "server.log"
        with log_path.open("wb") as log:
            # `python -m app.cli` is `arbiter` run from this checkout (see serve_and_bench.sh).
            server = subprocess.Popen(
                [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1",
                 "--port", str(port), "--log-level", "warning"],
                cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        url = f"http://127.0.0.1:{port}"
        try:
            wait_until_ready(url, server, log_path, READY_TIMEOUT_S)
            yield url, server.pid
        finally:
            if server.poll() is None:
                server.send_signal(signal.SIGTERM)
                try:
                    server.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    server.kill()
                    server.wait()


def process_counters(pid: int | None) -> tuple[int, float] | None:
    """Minor page faults and system CPU seconds of process `pid` and its children, from
    `/proc` (None without a pid or where there is no `/proc`)."""
    if pid is None:
        return None
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        faults, ticks = 0, 0
        for each in [pid, *map(int, children)]:
            # Fields after the command name's closing parenthesis: minflt is the 10th
            # field of the line, stime the 15th (proc(5)).
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            faults += int(fields[7])
            ticks += int(fields[12])
    except OSError:
        return None
    return faults, ticks / os.sysconf("SC_CLK_TCK")


def measure(
    url: str, body: bytes, duration_s: float, interval_s: float, pid: int | None = None
) -> tuple[Samples, Samples, tuple[int, float] | None]:
    """Decisions back to back on one thread, health probes on another: (health, decisions,
    the server's page faults and system seconds over them when `pid` is given)."""
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=url, timeout=120) as client:  # warm-up: first decision, probe
        client.post("/v1/decisions", content=body, headers=headers).raise_for_status()
        client.get("/healthz").raise_for_status()

    stop = threading.Event()
    health, decisions = Samples(), Samples()
    before = process_counters(pid)

    def decide() -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            while not stop.is_set():
                started = time.perf_counter()
                try:
                    ok = client.post("/v1/decisions", content=body, headers=headers).is_success
                except httpx.HTTPError:
                    ok = False
                decisions.add(ok, time.perf_counter() - started)

    decider = threading.Thread(target=decide, name="decisions")
    decider.start()
    deadline = time.perf_counter() + duration_s
    try:
        with httpx.Client(base_url=url, timeout=30) as client:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                try:
                    ok = client.get("/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                health.add(ok, time.perf_counter() - started)
                time.sleep(interval_s)
    finally:
        stop.set()
        decider.join()
    after = process_counters(pid)
    used = None
    if before is not None and after is not None:
        used = (after[0] - before[0], after[1] - before[1])
    return health, decisions, used


def summarise(
    args: argparse.Namespace,
    url: str,
    health: Samples,
    decisions: Samples,
    server: tuple[int, float] | None = None,
) -> Figures:
    if not health.latencies:
        raise SystemExit("no health probe succeeded")
    health_s = sorted(health.latencies)
    decision_s = sorted(decisions.latencies)
    threads = "as the service is set" if args.url else str(args.decision_threads or "default")
    done = len(decision_s) + decisions.errors
    faults = system_ms = None
    if server is not None and done:
        faults, system_ms = server[0] / done, server[1] / done * 1000
    return Figures(
        url=url,
        profile=args.profile,
        snapshot=args.snapshot.name,
        duration_s=args.duration_s,
        decision_threads=threads,
        health_requests=len(health_s) + health.errors,
        health_errors=health.errors,
        health_p50_ms=percentile(health_s, 0.50) * 1000,
        health_p99_ms=percentile(health_s, 0.99) * 1000,
        health_max_ms=health_s[-1] * 1000,
        decisions=len(decision_s),
        decision_errors=decisions.errors,
        decision_p50_ms=percentile(decision_s, 0.50) * 1000 if decision_s else None,
        server_faults_per_decision=faults,
        server_system_ms_per_decision=system_ms,
    )


def markdown(figures: Figures) -> str:
    decision_p50 = "–" if figures.decision_p50_ms is None else f"{figures.decision_p50_ms:.0f}"
    faults = figures.server_faults_per_decision
    system_ms = figures.server_system_ms_per_decision
    return "\n".join(
        [
            f"{figures.profile} on {figures.snapshot} back to back, one client; "
            f"GET /healthz polled for {figures.duration_s:g} s; "
            f"decision threads: {figures.decision_threads}",
            "",
            "| health probes | errors | health p50 ms | health p99 ms | health max ms "
            "| decisions done | decision p50 ms | server page faults / decision "
            "| server system ms / decision |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
            f"| {figures.health_requests} | {figures.health_errors} "
            f"| {figures.health_p50_ms:.1f} | {figures.health_p99_ms:.1f} "
            f"| {figures.health_max_ms:.1f} | {figures.decisions} | {decision_p50} "
            f"| {'–' if faults is None else f'{faults:.0f}'} "
            f"| {'–' if system_ms is None else f'{system_ms:.1f}'} |",
        ]
    )


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="GET /healthz latency while decisions run.")
    parser.add_argument("--url", help="a running service (loopback); default: start one here")
    parser.add_argument("--profile", default="oasis", help="profile of the decisions")
    parser.add_argument(
        "--snapshot", type=Path, default=EXAMPLES / "large.json", help="snapshot JSON"
    )
    parser.add_argument("--duration-s", type=float, default=20.0, help="seconds of probing")
    parser.add_argument(
        "--interval-ms", type=float, default=10.0, help="pause between health probes"
    )
    parser.add_argument(
        "--decision-threads",
        type=int,
        help="ARBITER_DECISION_THREADS of the service started here (default: its default)",
    )
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args(argv)
    if not 0 < args.duration_s <= 600:
        parser.error("--duration-s must be in (0, 600]")
    if args.interval_ms < 0:
        parser.error("--interval-ms must not be negative")
    if args.url is not None and not is_loopback(args.url):
        parser.error(f"--url must be a loopback address, not {args.url!r}")
    if args.url is not None and args.decision_threads is not None:
        parser.error("--decision-threads sets up the service started here; not with --url")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    snapshot = orjson.loads(args.snapshot.read_bytes())
    body = orjson.dumps({"profile": args.profile, "snapshot": snapshot})
    service: contextlib.AbstractContextManager[tuple[str, int | None]] = (
        contextlib.nullcontext((args.url.rstrip("/"), None))
        if args.url
        else embedded_service(args.decision_threads)
    )
    with service as (url, pid):
        print(f"measuring {url} for {args.duration_s:g} s", file=sys.stderr)
        health, decisions, server = measure(
            url, body, args.duration_s, args.interval_ms / 1000, pid
        )
    figures = summarise(args, url, health, decisions, server)
    print(json.dumps(asdict(figures), indent=2) if args.json else markdown(figures))
    return 1 if figures.health_errors or figures.decision_errors else 0


if __name__ == "__main__":
    sys.exit(main())
