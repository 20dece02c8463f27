"""Throwaway PostgreSQL and Redis servers that outage tests start, stop and kill.

PostgreSQL: ``initdb`` into a fresh directory, then ``pg_ctl`` on a free TCP port with
its unix socket in that directory too. ``fsync`` is off, since nothing here must
survive a power cut; ``synchronous_commit`` stays on, so a commit has written its WAL
before it returns and killing the server loses nothing committed (with it off, an
outage test would lose rows through no fault of the code under test). ``initdb``
refuses to run as root, so as root (CI containers) every server command runs as the
``postgres`` OS user through ``runuser``, in a directory under the system temp dir
owned by that user (pytest's own ``tmp_path`` is private to root).

Redis: ``redis-server`` on a free port without persistence (``--save ""``,
``--appendonly no``), so a restart comes back empty, as after losing a cache node.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

POSTGRES_BIN_CANDIDATES = (
    os.environ.get("ARBITER_TEST_PG_BIN", ""),
    "/usr/lib/postgresql/15/bin",
    "/usr/lib/postgresql/16/bin",
    "/usr/lib/postgresql/17/bin",
)


def wait_until(
    condition: Callable[[], bool], timeout_s: float, what: str, *, poll_s: float = 0.01
) -> None:
    """Return once `condition()` holds; fail the test after `timeout_s` naming `what`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(poll_s)


class ServerUnavailableError(RuntimeError):
    """A throwaway server cannot be started on this machine (binary or user missing)."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _postgres_bin_dir() -> Path:
    for candidate in POSTGRES_BIN_CANDIDATES:
        if candidate and (Path(candidate) / "pg_ctl").exists():
            return Path(candidate)
    pg_ctl = shutil.which("pg_ctl")
    if pg_ctl:
        return Path(pg_ctl).parent
    raise ServerUnavailableError(
        "PostgreSQL server binaries (initdb, pg_ctl) not found; set ARBITER_TEST_PG_BIN"
    )


class ThrowawayPostgres:
    """A private PostgreSQL cluster: ``init()``, ``start()``, ``stop()``, ``cleanup()``."""

    def __init__(self) -> None:
        self.bin_dir = _postgres_bin_dir()
        self.port = free_port()
        self.base_dir = Path(tempfile.mkdtemp(prefix="arbiter-pg-"))
        self.data_dir = self.base_dir / "data"
        self.log_path = self.base_dir / "server.log"
        self._as_root = os.geteuid() == 0
        if self._as_root:
            try:
                owner = pwd.getpwnam("postgres")
            except KeyError as error:
                raise ServerUnavailableError(
                    "running as root needs a 'postgres' OS user for initdb"
                ) from error
            os.chown(self.base_dir, owner.pw_uid, owner.pw_gid)
        self.running = False

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *argv: str, timeout_s: float = 60) -> None:
        command = [str(self.bin_dir / argv[0]), *argv[1:]]
        if self._as_root:
            command = ["runuser", "-u", "postgres", "--", *command]
        completed = subprocess.run(
            command, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if completed.returncode != 0:
            log = self.log_path.read_text() if self.log_path.exists() else ""
            raise RuntimeError(
                f"{' '.join(command)} failed ({completed.returncode}):\n"
                f"{completed.stdout}\n{completed.stderr}\n{log[-4000:]}"
            )

    def init(self) -> None:
        self._run(
            "initdb",
            "--pgdata",
            str(self.data_dir),
            "--username",
            "postgres",
            "--auth",
            "trust",
            "--encoding",
            "UTF8",
            "--no-sync",
        )
        settings = (
            f"port = {self.port}\n"
            "listen_addresses = '127.0.0.1'\n"
            f"unix_socket_directories = '{self.base_dir}'\n"
            "fsync = off\n"
            "full_page_writes = off\n"
        )
        with open(self.data_dir / "postgresql.conf", "a") as conf:
            conf.write(settings)

    def start(self) -> None:
        self._run("pg_ctl", "--pgdata", str(self.data_dir), "--log", str(self.log_path),
                  "--wait", "--timeout", "30", "start")  # fmt: skip
        self.running = True

    def stop(self, mode: str = "immediate") -> None:
        """Stop the server; ``immediate`` is the abrupt kind (no clean shutdown)."""
        self._run("pg_ctl", "--pgdata", str(self.data_dir), "--mode", mode, "--wait", "stop")
        self.running = False

    def cleanup(self) -> None:
        if self.running:
            with contextlib.suppress(Exception):
                self.stop()
        shutil.rmtree(self.base_dir, ignore_errors=True)


class ThrowawayRedis:
    """A private ``redis-server``: ``start()``, ``kill()`` (SIGKILL), ``cleanup()``."""

    def __init__(self) -> None:
        executable = shutil.which("redis-server")
        if executable is None:
            raise ServerUnavailableError("redis-server not found on PATH")
        self.executable = executable
        self.port = free_port()
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> None:
        self._process = subprocess.Popen(
            [self.executable, "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no", "--daemonize", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                probe.settimeout(0.2)
                try:
                    probe.connect(("127.0.0.1", self.port))
                    probe.sendall(b"PING\r\n")
                    if probe.recv(16).startswith(b"+PONG"):
                        return
                except OSError:
                    pass
            if self._process.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self._process.returncode}")
            time.sleep(0.05)
        raise RuntimeError(f"redis-server did not answer on port {self.port}")

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()
            self._process.wait(10)
            self._process = None

    def cleanup(self) -> None:
        self.kill()
