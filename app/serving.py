"""`arbiter serve --workers N`: N worker processes, each listening on the port itself.

uvicorn's own multi-worker mode binds one socket in its supervisor and hands it to every
worker. A worker's event loop, woken by a pending connection, accepts every connection
then pending, so a client that opens its keep-alive connections together (a cluster
manager's connection pool, a load generator) often has all of them on one worker while
the others idle: with two workers and eight connections, about half the runs of the
throughput benchmark here served at one worker's rate (docs/benchmarks.md, "Two
workers"). Here every worker binds its own socket with ``SO_REUSEPORT``, and the kernel
spreads new connections over the workers' sockets by a hash of each connection's
addresses.

The supervisor keeps a socket bound to the port (never listening, so it is given no
connections): it reserves the port against other programs while a worker restarts, and
resolves port 0 to the port every worker then binds. Each worker tells the supervisor
when its start-up is done (the app's lifespan has run and its socket is served). A
worker that dies after that is restarted; one that dies before it failed to start (a
database that cannot be reached, a bad setting), and the supervisor stops every worker
and exits with its code instead of restarting it in a loop. Readiness, not the time
since the start, tells the two apart: on a loaded machine, importing the app alone can
take longer than any fixed grace period.

Linux only (other systems either lack ``SO_REUSEPORT`` or do not balance with it):
elsewhere, :func:`serve` hands several workers to uvicorn's own mode.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import signal
import socket
import sys
import time
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from multiprocessing.synchronize import Event
from types import FrameType
from typing import Any

import uvicorn

logger = logging.getLogger("arbiter.serve")

APP = "app.main:app_factory"
STOP_TIMEOUT_S = 30.0
"""How long workers get to finish their requests after SIGTERM before they are killed."""
BACKLOG = 2048  # uvicorn's default


@dataclass(frozen=True)
class ServeOptions:
    host: str
    port: int
    workers: int
    log_level: str


def reuse_port_balances() -> bool:
    """Whether the kernel spreads connections over sockets sharing a port (Linux)."""
    return sys.platform.startswith("linux") and hasattr(socket, "SO_REUSEPORT")


def serve(options: ServeOptions) -> int:
    """Serve until interrupted; the exit code. The command line checks `workers` ≥ 1."""
    if options.workers == 1 or not reuse_port_balances():
        _uvicorn_run(options)
        return 0
    return Supervisor(options).run()


def _uvicorn_options(log_level: str) -> dict[str, Any]:
    return {
        "factory": True,
        "log_level": log_level,
        # Named rather than "auto", so that a missing package fails at start instead of
        # silently serving on the pure-Python loop and parser (both in uvicorn[standard]).
        "loop": "uvloop",
        "http": "httptools",
        "access_log": False,  # a log line per decision costs more than the decision
    }


def _uvicorn_run(options: ServeOptions) -> None:
    uvicorn.run(
        APP,
        host=options.host,
        port=options.port,
        workers=options.workers,
        **_uvicorn_options(options.log_level),
    )


def _address(host: str, port: int) -> tuple[socket.AddressFamily, tuple[str, int]]:
    family, _, _, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
    )[0]
    return family, (str(address[0]), int(address[1]))


def shared_socket(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port) with ``SO_REUSEPORT``, not yet listening."""
    family, address = _address(host, port)
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(address)
    except OSError:
        sock.close()
        raise
    return sock


class _WorkerServer(uvicorn.Server):
    """uvicorn, setting `ready` once its start-up is done (a failed one exits first)."""

    def __init__(self, config: uvicorn.Config, ready: Event) -> None:
        super().__init__(config)
        self._ready = ready

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        self._ready.set()


def run_worker(host: str, port: int, log_level: str, ready: Event) -> None:
    """One worker process: its own listening socket on the shared port, and uvicorn."""
    sock = shared_socket(host, port)
    sock.listen(BACKLOG)
    _WorkerServer(uvicorn.Config(APP, **_uvicorn_options(log_level)), ready).run(sockets=[sock])


class Supervisor:
    """Starts the workers, restarts one that dies, stops them all on SIGINT or SIGTERM."""

    def __init__(self, options: ServeOptions) -> None:
        self.options = options
        self._context = multiprocessing.get_context("spawn")
        self._stopping = False
        self._workers: dict[int, tuple[BaseProcess, Event]] = {}  # slot -> (process, ready)

    def run(self) -> int:
        try:
            reserved = shared_socket(self.options.host, self.options.port)
        except OSError as error:
            logger.error("cannot bind %s:%d: %s", self.options.host, self.options.port, error)
            return 1
        with reserved:
            port = int(reserved.getsockname()[1])
            previous = {
                signum: signal.signal(signum, self._stop)
                for signum in (signal.SIGINT, signal.SIGTERM)
            }
            try:
                return self._supervise(port)
            finally:
                self._stop_all()
                for signum, handler in previous.items():
                    signal.signal(signum, handler)

    def _stop(self, signum: int, _frame: FrameType | None) -> None:
        self._stopping = True

    def _start(self, slot: int, port: int) -> None:
        ready = self._context.Event()
        process = self._context.Process(
            target=run_worker,
            args=(self.options.host, port, self.options.log_level, ready),
            name=f"arbiter-worker-{slot}",
        )
        process.start()
        self._workers[slot] = (process, ready)

    def _supervise(self, port: int) -> int:
        print(
            f"arbiter: {self.options.workers} workers on {self.options.host}:{port} (SO_REUSEPORT)",
            file=sys.stderr,
            flush=True,
        )
        for slot in range(self.options.workers):
            self._start(slot, port)
        while not self._stopping:
            sentinels = [process.sentinel for process, _ in self._workers.values()]
            multiprocessing.connection.wait(sentinels, timeout=0.5)
            for slot, (process, ready) in list(self._workers.items()):
                if process.is_alive() or self._stopping:
                    continue
                code = process.exitcode if process.exitcode is not None else 1
                if not ready.is_set():
                    logger.error("worker %d exited with %s during start-up; stopping", slot, code)
                    return code if code > 0 else 1
                logger.warning("worker %d exited with %s; restarting it", slot, code)
                self._start(slot, port)
        return 0

    def _stop_all(self) -> None:
        processes = [process for process, _ in self._workers.values()]
        for process in processes:
            if process.is_alive():
                # SIGTERM: uvicorn stops accepting and finishes its requests.
                with contextlib.suppress(ProcessLookupError):  # exited meanwhile
                    process.terminate()
        deadline = time.monotonic() + STOP_TIMEOUT_S
        for process in processes:
            process.join(max(0.0, deadline - time.monotonic()))
            if process.is_alive():
                process.kill()
                process.join()
