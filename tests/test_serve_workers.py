"""`arbiter serve --workers N`: every worker takes connections, a dead one is replaced,
a start-up failure ends the service, SIGTERM stops every worker.

The service runs for real in a child process on a free port, on embedded defaults (a
throwaway SQLite file). Which worker holds a connection is read from the kernel: the
socket inodes each worker process has open against the established TCP connections of
the port (Linux's /proc).
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.serving import reuse_port_balances
from tests.servers import free_port, wait_until

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(
    not reuse_port_balances(), reason="SO_REUSEPORT balancing is Linux's"
)


def launch(port: int, workers: int, tmp_path: Path, **env: str) -> subprocess.Popen[bytes]:
    code = (
        "import app.serving as s\n"
        f"raise SystemExit(s.serve(s.ServeOptions('127.0.0.1', {port}, {workers}, 'warning')))"
    )
    return subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env={
            **os.environ,
            "ARBITER_DATABASE_URL": f"sqlite:///{tmp_path / 'arbiter.db'}",
            "ARBITER_SPILL_DIR": str(tmp_path / "spill"),
            **env,
        },
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


def workers_of(supervisor: subprocess.Popen[bytes]) -> list[int]:
    """The worker processes (not multiprocessing's resource tracker)."""
    children = Path(f"/proc/{supervisor.pid}/task/{supervisor.pid}/children")
    pids = [int(pid) for pid in children.read_text().split()]
    return [pid for pid in pids if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def healthy(port: int) -> bool:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
    try:
        connection.request("GET", "/healthz")
        return connection.getresponse().status == 200
    except OSError:
        return False
    finally:
        connection.close()


@contextlib.contextmanager
def serving(port: int, workers: int, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    supervisor = launch(port, workers, tmp_path)
    try:
        wait_until(
            lambda: len(workers_of(supervisor)) == workers and healthy(port),
            60.0,
            f"{workers} workers answering",
            poll_s=0.2,
        )
        yield supervisor
    finally:
        if supervisor.poll() is None:
            supervisor.terminate()
        supervisor.wait(timeout=60)


def connections_by_worker(port: int, pids: list[int]) -> dict[int, int]:
    """Established connections to `port` held by each of `pids`."""
    established: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError):
            for line in Path(table).read_text().splitlines()[1:]:
                fields = line.split()
                local_port = int(fields[1].rsplit(":", 1)[1], 16)
                if local_port == port and fields[3] == "01":  # 01: ESTABLISHED
                    established.add(fields[9])  # the socket's inode
    counts: dict[int, int] = {}
    for pid in pids:
        inodes = set()
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                target = os.readlink(fd)
                if target.startswith("socket:["):
                    inodes.add(target[len("socket:[") : -1])
        counts[pid] = len(inodes & established)
    return counts


def answers_by_worker(port: int, supervisor: subprocess.Popen[bytes]) -> dict[int, int]:
    """Open 24 connections at once, as a client's connection pool opens them (with one
    shared socket, the first worker to wake would accept them all), ask `/healthz` on
    each, and count the connections each worker holds."""
    connections = [http.client.HTTPConnection("127.0.0.1", port, timeout=10) for _ in range(24)]
    try:
        for connection in connections:
            connection.connect()
        for connection in connections:
            connection.request("GET", "/healthz")
            assert connection.getresponse().read() == b'{"status":"ok"}'
        return connections_by_worker(port, workers_of(supervisor))
    finally:
        for connection in connections:
            connection.close()


def test_connections_opened_together_are_spread_over_every_worker(tmp_path: Path) -> None:
    port = free_port()
    with serving(port, 2, tmp_path) as supervisor:
        counts = answers_by_worker(port, supervisor)
    assert sum(counts.values()) == 24
    assert all(count > 0 for count in counts.values()), counts


def test_a_worker_that_dies_is_replaced_and_the_port_keeps_answering(tmp_path: Path) -> None:
    port = free_port()
    with serving(port, 2, tmp_path) as supervisor:
        # Both workers answering: each has started, so a death now is not a failed start.
        wait_until(
            lambda: all(answers_by_worker(port, supervisor).values()),
            60.0,
            "both workers answering",
            poll_s=0.2,
        )
        victim = workers_of(supervisor)[0]
        os.kill(victim, signal.SIGKILL)
        wait_until(
            lambda: len(workers_of(supervisor)) == 2 and victim not in workers_of(supervisor),
            60.0,
            "a replacement worker",
            poll_s=0.2,
        )
        wait_until(lambda: healthy(port), 60.0, "the port answering again", poll_s=0.2)
        assert supervisor.poll() is None


def test_a_worker_that_cannot_start_ends_the_service_with_its_error(tmp_path: Path) -> None:
    supervisor = launch(free_port(), 2, tmp_path, ARBITER_LOG_BATCH_SIZE="0")
    output, _ = supervisor.communicate(timeout=120)
    assert supervisor.returncode != 0
    assert b"log_batch_size" in output  # the setting at fault, as the worker reported it


def test_a_worker_that_dies_before_its_start_up_is_done_ends_the_service(tmp_path: Path) -> None:
    # Readiness, not time, marks a start: killed while it still imports the app (seconds,
    # and longer on a loaded machine), the worker never started, and no restart loop follows.
    supervisor = launch(free_port(), 2, tmp_path)
    try:
        wait_until(lambda: len(workers_of(supervisor)) == 2, 60.0, "2 workers", poll_s=0.05)
        os.kill(workers_of(supervisor)[0], signal.SIGKILL)
        output, _ = supervisor.communicate(timeout=120)
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    assert supervisor.returncode != 0
    assert b"during start-up" in output


def test_sigterm_stops_every_worker_and_exits_cleanly(tmp_path: Path) -> None:
    port = free_port()
    supervisor = launch(port, 2, tmp_path)
    try:
        wait_until(
            lambda: len(workers_of(supervisor)) == 2 and healthy(port),
            60.0,
            "2 workers answering",
            poll_s=0.2,
        )
        pids = workers_of(supervisor)
        supervisor.send_signal(signal.SIGTERM)
        assert supervisor.wait(timeout=60) == 0
    finally:
        if supervisor.poll() is None:
            supervisor.kill()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists() or _is_zombie_or_gone(pid)
    assert not healthy(port)


def _is_zombie_or_gone(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    except FileNotFoundError:
        return True


def test_a_port_taken_by_another_program_is_refused_at_once(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        supervisor = launch(taken.getsockname()[1], 2, tmp_path)
        output, _ = supervisor.communicate(timeout=60)
    assert supervisor.returncode == 1
    assert b"cannot bind" in output
