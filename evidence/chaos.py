"""Faults under load: what a database outage, a cache kill and a killed retrain worker lose.

    .venv/bin/python -m evidence.chaos                    # faults under load (about 4 minutes)
    .venv/bin/python -m evidence.chaos --soak-min 30      # mixed traffic, no faults, 30 minutes
    .venv/bin/python -m evidence.chaos --json out.json    # the figures as JSON too

Starts a throwaway PostgreSQL and a throwaway Redis (the servers the outage tests use,
`tests/servers.py`), then `arbiter serve` (one worker, this checkout) on them with an
admin token, and drives it from `--clients` threads, each posting as fast as it is
answered: four decisions (profiles `fifo`, `tiresias`, `drf`, `oasis` in turn, on
`examples/small.json` with a fresh cluster id per client) for every feedback call of
five `job_finished` events with fresh event ids. Each client keeps the ids the service
accepted (200 for a decision, 202 for feedback).

Faults (default run, times from the start of the load):
- `database`: PostgreSQL stopped abruptly (`pg_ctl stop -m immediate`) at 20 s and
  started again 20 s later;
- `cache`: Redis killed (SIGKILL) at 60 s and started again, empty, 10 s later;
- `worker`: at 80 s an `arbiter worker` is started and a small DL2 retraining is sent
  (`POST /admin/retrain`); once it runs, the worker and the work horse it forked are
  killed (SIGKILL to its whole session, as when its machine dies); the job must
  be failed within the heartbeat timeout (`ARBITER_RETRAIN_HEARTBEAT_TIMEOUT_S`, 15 s
  here) and, sent again to a new worker, succeed.

When the load stops the script waits for the decision log to drain and counts, in
PostgreSQL, every accepted decision id and feedback event id: lost = accepted − stored.
It also counts answers by status (any 5xx is a failure) and reads the service's
resident memory (`VmRSS`) at the start and at the end of the load. `--soak-min N` runs
the same mixed traffic for N minutes with no faults, sampling memory every minute.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

import httpx
from sqlalchemy import create_engine, text

from evidence.bench_memory import MIB, free_loopback_port, rss_bytes
from evidence.runner import EXAMPLES, ROOT, add_json, command_line, wait_until_ready, write_json
from storage.db import normalize_database_url
from tests.servers import ThrowawayPostgres, ThrowawayRedis

ADMIN_TOKEN = "chaos-admin-token-0123456789"
PROFILES = ("fifo", "tiresias", "drf", "oasis")
HEARTBEAT_TIMEOUT_S = 15.0

Say = Callable[[str], None]


@dataclass
class Tally:
    """What the clients sent and what the service accepted."""

    decisions: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)
    statuses: Counter[int] = field(default_factory=Counter)
    transport_errors: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class Report:
    mode: str
    seconds: float
    clients: int
    requests: int
    per_s: float
    statuses: dict[str, int]
    transport_errors: int
    decisions_accepted: int
    decisions_stored: int
    events_accepted: int
    events_stored: int
    rss_start_mib: float
    rss_end_mib: float
    rss_samples_mib: list[tuple[float, float]]
    faults: list[str]
    retrain_resent: str | None
    """How the retraining sent again after its worker was killed ended (None: not run)."""

    @property
    def lost(self) -> int:
        return (self.decisions_accepted - self.decisions_stored) + (
            self.events_accepted - self.events_stored
        )


@contextmanager
def service(env: dict[str, str], workdir: Path) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_loopback_port()
    url = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-m", "app.cli", "serve", "--host", "127.0.0.1"]
    command += ["--port", str(port), "--log-level", "warning"]
    log_path = workdir / "server.log"
    with log_path.open("wb") as log:
        server = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until_ready(url, server, log_path, 120.0)
        yield url, server
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def start_worker(env: dict[str, str], workdir: Path, name: str) -> subprocess.Popen[bytes]:
    with (workdir / f"{name}.log").open("wb") as log:
        # Its own session, so that killing the session takes the work horse it forks
        # too (RQ puts the horse in a process group of its own, not a session), as when
        # the machine or container running it dies.
        return subprocess.Popen(
            [sys.executable, "-m", "app.cli", "worker"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def client_loop(url: str, index: int, tally: Tally, stop: threading.Event) -> None:
    snapshot = json.loads((EXAMPLES / "small.json").read_text())
    snapshot["cluster_id"] = f"chaos-{index}"
    profiles = itertools.cycle(PROFILES)
    with httpx.Client(base_url=url, timeout=30) as http:
        step = 0
        while not stop.is_set():
            step += 1
            try:
                if step % 5:
                    body = {"profile": next(profiles), "snapshot": snapshot}
                    answer = http.post("/v1/decisions", json=body)
                    accepted = answer.json()["decision_id"] if answer.status_code == 200 else None
                    with tally.lock:
                        tally.statuses[answer.status_code] += 1
                        if accepted:
                            tally.decisions.append(accepted)
                else:
                    ids = [f"chaos-{uuid.uuid4().hex}" for _ in range(5)]
                    events = [
                        {"event_id": i, "kind": "job_finished", "job_id": "j1", "finished_at": 1.0}
                        for i in ids
                    ]
                    answer = http.post("/v1/feedback", json={"events": events})
                    with tally.lock:
                        tally.statuses[answer.status_code] += 1
                        if answer.status_code == 202:
                            tally.events.extend(ids)
            except httpx.TransportError:
                with tally.lock:
                    tally.transport_errors += 1
                time.sleep(0.1)


def kill_session(sid: int) -> None:
    """SIGKILL every process of session `sid` (a worker and its work horse)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[3]) == sid:  # after the command: state, ppid, pgrp, session
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(entry.name), signal.SIGKILL)


def retrain_status(http: httpx.Client, job_id: str) -> str:
    answer = http.get(f"/admin/retrain/{job_id}")
    answer.raise_for_status()
    status: str = answer.json()["status"]
    return status


def wait_for(what: str, check: Callable[[], bool], timeout_s: float) -> float:
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > timeout_s:
            raise SystemExit(f"chaos: {what} did not happen within {timeout_s:g} s")
        time.sleep(0.5)
    return time.monotonic() - started


def kill_a_retrain_worker(
    url: str, env: dict[str, str], workdir: Path, say: Say
) -> tuple[list[str], str]:
    """Kill a worker mid-retraining; the job is failed by heartbeat and a resend succeeds.

    Returns the notes and the status the resent job ended with.
    """
    notes: list[str] = []
    headers = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    body = {"policy": "dl2", "steps": 2, "activate": "never", "concurrent": True}
    with httpx.Client(base_url=url, timeout=30, headers=headers) as http:
        worker = start_worker(env, workdir, "worker-1")
        job = http.post("/admin/retrain", json=body).json()["id"]
        wait_for("the retraining to start", lambda: retrain_status(http, job) == "running", 120)
        kill_session(worker.pid)
        worker.wait()
        say(f"worker killed while retraining {job} ran")
        took = wait_for(
            "the orphaned retraining to be failed",
            lambda: retrain_status(http, job) == "failed",
            HEARTBEAT_TIMEOUT_S * 4,
        )
        notes.append(f"retraining {job} failed {took:.0f} s after its worker was killed")
        say(notes[-1])
        worker = start_worker(env, workdir, "worker-2")
        try:
            again = http.post("/admin/retrain", json=body).json()["id"]
            took = wait_for(
                "the resent retraining to finish",
                lambda: retrain_status(http, again) in {"succeeded", "failed"},
                600,
            )
            final = http.get(f"/admin/retrain/{again}").json()
            error = f" ({final['error']})" if final.get("error") else ""
            notes.append(f"sent again as {again}: {final['status']} after {took:.0f} s{error}")
            say(notes[-1])
            resent: str = final["status"]
        finally:
            kill_session(worker.pid)
            worker.wait()
    return notes, resent


def count_stored(database_url: str, decisions: list[str], events: list[str]) -> tuple[int, int]:
    engine = create_engine(normalize_database_url(database_url))
    try:
        with engine.connect() as connection:
            stored_decisions = connection.execute(
                text("SELECT count(*) FROM decisions WHERE decision_id = ANY(:ids)"),
                {"ids": decisions},
            ).scalar_one()
            stored_events = connection.execute(
                text("SELECT count(*) FROM feedback_events WHERE event_id = ANY(:ids)"),
                {"ids": events},
            ).scalar_one()
        return int(stored_decisions), int(stored_events)
    finally:
        engine.dispose()


def run(clients: int, soak_min: float | None, say: Say) -> Report:
    workdir = Path(tempfile.mkdtemp(prefix="arbiter-chaos."))
    postgres, redis = ThrowawayPostgres(), ThrowawayRedis()
    postgres.init()
    postgres.start()
    redis.start()
    env = {key: value for key, value in os.environ.items() if not key.startswith("ARBITER_")}
    env.update(
        ARBITER_DATABASE_URL=postgres.url,
        ARBITER_REDIS_URL=redis.url,
        ARBITER_ADMIN_TOKEN=ADMIN_TOKEN,
        ARBITER_SPILL_DIR=str(workdir / "spill"),
        ARBITER_RETRAIN_HEARTBEAT_TIMEOUT_S=str(HEARTBEAT_TIMEOUT_S),
    )
    tally, stop, faults = Tally(), threading.Event(), []
    resent: str | None = None
    samples: list[tuple[float, float]] = []
    try:
        with service(env, workdir) as (url, server):
            threads = [
                threading.Thread(target=client_loop, args=(url, i, tally, stop), daemon=True)
                for i in range(clients)
            ]
            started = time.monotonic()
            for thread in threads:
                thread.start()

            def at(second: float) -> None:
                time.sleep(max(0.0, started + second - time.monotonic()))

            def sample() -> None:
                samples.append((time.monotonic() - started, rss_bytes(server.pid) / MIB))

            at(5)
            sample()
            if soak_min is None:
                at(20)
                postgres.stop("immediate")
                say("database stopped")
                at(40)
                postgres.start()
                faults.append("PostgreSQL stopped abruptly at 20 s, back at 40 s")
                say("database back")
                at(60)
                redis.kill()
                say("cache killed")
                at(70)
                redis.start()
                faults.append("Redis killed at 60 s, started again (empty) at 70 s")
                say("cache back")
                at(80)
                notes, resent = kill_a_retrain_worker(url, env, workdir, say)
                faults += notes
                at(max(120.0, time.monotonic() - started + 10))
            else:
                minutes = int(soak_min)
                for minute in range(1, minutes + 1):
                    at(60 * minute)
                    sample()
                    say(f"{minute} min: {samples[-1][1]:,.1f} MiB resident")
                at(60 * soak_min)
            sample()
            seconds = time.monotonic() - started
            stop.set()
            for thread in threads:
                thread.join(timeout=60)
            # The log drains in the background: count until everything accepted is stored
            # or the count stops moving.
            stored, last_change, last = (0, 0), time.monotonic(), (-1, -1)
            while time.monotonic() - last_change < 30:
                stored = count_stored(postgres.url, tally.decisions, tally.events)
                if stored == (len(tally.decisions), len(tally.events)):
                    break
                if stored != last:
                    last, last_change = stored, time.monotonic()
                time.sleep(1)
    finally:
        redis.cleanup()
        postgres.cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    requests = sum(tally.statuses.values())
    return Report(
        mode="soak" if soak_min is not None else "faults",
        seconds=seconds,
        clients=clients,
        requests=requests,
        per_s=requests / seconds,
        statuses={str(code): n for code, n in sorted(tally.statuses.items())},
        transport_errors=tally.transport_errors,
        decisions_accepted=len(tally.decisions),
        decisions_stored=stored[0],
        events_accepted=len(tally.events),
        events_stored=stored[1],
        rss_start_mib=samples[0][1],
        rss_end_mib=samples[-1][1],
        rss_samples_mib=samples,
        faults=faults,
        retrain_resent=resent,
    )


def render(report: Report) -> str:
    lines = [
        f"| {report.mode} | {report.seconds:.0f} s | {report.clients} | {report.requests:,} "
        f"({report.per_s:.0f}/s) | {', '.join(f'{c}: {n:,}' for c, n in report.statuses.items())}"
        f" | {report.transport_errors} | {report.decisions_accepted:,} / "
        f"{report.decisions_stored:,} | {report.events_accepted:,} / {report.events_stored:,} "
        f"| {report.lost} | {report.rss_start_mib:,.0f} → {report.rss_end_mib:,.0f} MiB |",
    ]
    header = [
        "| run | load | clients | requests | answers by status | connection errors "
        "| decisions accepted / stored | feedback events accepted / stored | lost "
        "| service memory |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---|",
    ]
    faults = [f"- {fault}" for fault in report.faults]
    return "\n".join([*header, *lines, "", *faults])


def main(argv: list[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--clients", type=int, default=4, help="client threads (default 4)")
    parser.add_argument("--soak-min", type=float, help="mixed traffic, no faults, N minutes")
    add_json(parser)
    args = parser.parse_args(argv)

    def say(message: str) -> None:
        print(f"chaos: {message}", file=sys.stderr, flush=True)

    report = run(args.clients, args.soak_min, say)
    print(render(report))
    if args.json:
        write_json(args.json, {**asdict(report), "lost": report.lost})
    bad = (
        report.lost
        or any(code.startswith("5") for code in report.statuses)
        or report.retrain_resent not in {None, "succeeded"}
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
