"""POST /v1/simulate: a what-if run of the simulator under one or more profiles.

The request carries a small trace (rows of the shared trace schema) and a cluster spec
(the schema of `shared/clusters`), or a snapshot of the cluster now and the jobs still to
come (trace rows, :mod:`simulator.state`), with the profiles and the workload options of
`arbiter simulate`; the answer is the simulator's metrics per profile, the same JSON
as `arbiter simulate --json`. The run is the simulator's own
(:func:`simulator.runner.simulate`) through the same engine as decisions.

Simulations are CPU-bound and may take seconds, so they run in a pool of worker
processes (`ARBITER_SIMULATE_PROCESSES`), never on the event loop or the decision
threads: a decision never waits behind one. Each is bounded: at most
`ARBITER_SIMULATE_MAX_JOBS` trace rows (or snapshot jobs and arrivals) and
`ARBITER_SIMULATE_MAX_PROFILES` profiles (more is a 422 naming the limit), and
`ARBITER_SIMULATE_TIMEOUT_S` seconds of run time (a run past it stops and is a 422
naming the limit).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

import orjson

from app.errors import InvalidRequestError, NotFoundError, UnavailableError, invalid_request
from app.schemas import SimulateRequest, SimulateSnapshot, TraceRow
from app.services.decisions import decode_body, parse_body
from policies.decision import Decision
from policies.model import Problem, Snapshot, ThroughputObservation, snapshot_problems
from policies.profiles import Profile
from policies.reclaim_models import ReclaimRequest, ReclaimResult
from simulator.state import StartState, StateError, start_state
from simulator.traces import TraceError, TraceJob, trace_from_rows
from simulator.workload import WorkloadError, WorkloadOptions


@dataclass(frozen=True)
class SimulateLimits:
    max_jobs: int = 2000
    max_profiles: int = 8
    max_nodes: int = 20_000
    """Nodes a cluster spec may build: a spec is a few lines whatever its `count`s say, so
    the limit on the body's size does not bound the nodes a worker would make of it."""
    timeout_s: float = 60.0
    processes: int = 1


_BACKSTOP_GRACE_S = 10.0
_COLD_START_GRACE_S = 120.0
"""More backstop for the call that starts the pool: spawning a worker and importing the
engine (torch included) is not the simulation, and takes a busy host tens of seconds."""


class SimulationTimeout(RuntimeError):
    """A run past its time limit (raised inside the worker process)."""


def _rows(rows: Sequence[TraceRow], name: str) -> list[TraceJob]:
    return trace_from_rows([row.model_dump(exclude_none=True) for row in rows], name)


def _trace(request: SimulateRequest) -> list[TraceJob]:
    return _rows(request.trace or [], "trace")


def _snapshot(raw: dict[str, Any] | None) -> Snapshot:
    """A request's snapshot, decoded and checked as a decision's: a 422 lists every
    field-level and cross-field problem at its path."""
    snapshot = decode_body(orjson.dumps({"snapshot": raw}), SimulateSnapshot).snapshot
    problems = snapshot_problems(snapshot)
    if problems:
        raise invalid_request(
            [Problem(path=f"snapshot.{p.path}", message=p.message) for p in problems]
        )
    return snapshot


def _parse(body: bytes) -> SimulateRequest:
    """The request; a 422 lists the problems of its snapshot too, beside the others."""
    try:
        return parse_body(body, SimulateRequest)
    except InvalidRequestError as error:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise error from None
        raw = document.get("snapshot") if isinstance(document, dict) else None
        if not isinstance(raw, dict):
            raise
        try:
            _snapshot(raw)
        except InvalidRequestError as found:
            raise invalid_request([*error.problems, *found.problems]) from error
        raise


def _start(request: SimulateRequest, snapshot: Snapshot) -> StartState:
    return start_state(
        snapshot, _rows(request.arrivals, "arrivals"), _workload(request), request.seed
    )


def _job_count(request: SimulateRequest) -> int:
    if request.snapshot is None:
        return len(request.trace or [])
    jobs = request.snapshot.get("jobs")
    return (len(jobs) if isinstance(jobs, list) else 0) + len(request.arrivals)


def _workload(request: SimulateRequest) -> WorkloadOptions:
    options = request.workload
    return WorkloadOptions(
        model_mix=options.model_mix,
        elastic_fraction=options.elastic_fraction,
        ps_fraction=options.ps_fraction,
        estimate_error=options.estimate_error,
        utility=options.utility,
        utility_value=options.utility_value,
    )


def run_simulation(
    request: dict[str, Any], profiles: dict[str, dict[str, Any]], timeout_s: float
) -> dict[str, Any]:
    """The metrics of every profile for one request (in a worker process).

    The request was checked by :meth:`SimulateService.check`. Returns `{"results": [...]}`,
    `{"timeout": jobs finished}` when the run went past `timeout_s`, or
    `{"invalid": [path, message]}` when the simulation cannot go on.
    """
    # Imported here: only the worker process runs simulations.
    from simulator.core import SimOptions, SimulationError  # noqa: PLC0415
    from simulator.deciders import EngineDecider  # noqa: PLC0415
    from simulator.inference import InferenceOptions  # noqa: PLC0415
    from simulator.report import results_json  # noqa: PLC0415
    from simulator.runner import RunConfig, simulate, simulate_jobs  # noqa: PLC0415

    parsed = SimulateRequest.model_validate(request)
    config = RunConfig(
        seed=parsed.seed,
        perf_mode=parsed.perf_model,
        workload=_workload(parsed),
        sim=SimOptions(round_period_s=parsed.round_period_s),
        inference=InferenceOptions(loan_idle=parsed.loan_idle),
    )
    # Every profile's engine is built before the clock starts: building one imports the
    # policies (torch for the learned ones), which on a cold or busy worker takes seconds
    # that are start-up, not simulation.
    # One fresh engine per run (an engine keeps its policies' state), in run order.
    engines: dict[str, list[EngineDecider]] = {}
    for name in parsed.profiles:
        engines.setdefault(name, []).append(EngineDecider(Profile.model_validate(profiles[name])))
    deadline = time.monotonic() + timeout_s
    finished = 0

    def on_progress(_: str) -> Any:
        def advance(count: int) -> None:
            nonlocal finished
            finished += count

        return advance

    class TimedDecider:
        """The profile's engine, stopping the run once it is past its time: checked at
        every decision, so a run that decides without finishing jobs stops too."""

        def __init__(self, name: str) -> None:
            self.engine = engines[name].pop(0)

        def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
            if time.monotonic() > deadline:
                raise SimulationTimeout
            return self.engine(snapshot, seed, decision_id)

        def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
            return self.engine.reclaim(snapshot, request, seed)

        # What the simulator asks of a decider besides its answers, as the engine says:
        # which rounds it needs, and the throughput feedback its learners fold in.
        @property
        def settles(self) -> bool:
            return self.engine.settles

        @property
        def gathers(self) -> bool:
            return self.engine.gathers

        @property
        def learns_from_feedback(self) -> bool:
            return self.engine.learns_from_feedback

        def observe(self, observations: Sequence[ThroughputObservation]) -> None:
            self.engine.observe(observations)

    try:
        if parsed.snapshot is None:
            assert parsed.cluster is not None  # the service checked the form
            runs = simulate(
                _trace(parsed),
                parsed.cluster,
                parsed.profiles,
                config,
                decider_for=TimedDecider,
                on_progress=on_progress,
            )
        else:
            start = _start(parsed, _snapshot(parsed.snapshot))
            runs = simulate_jobs(
                start.jobs,
                start.cluster,
                parsed.profiles,
                config,
                initial_placements=start.placements,
                decider_for=TimedDecider,
                on_progress=on_progress,
            )
    except SimulationTimeout:
        return {"timeout": finished}
    except SimulationError as error:
        return {"invalid": ["trace", f"the simulation cannot go on: {error}"]}
    return results_json([(run.profile, run.result) for run in runs])


def _check_form(request: SimulateRequest) -> None:
    """Either a trace on a cluster, or a snapshot and its arrivals: a 422 names the field."""
    problems = []
    if request.snapshot is None:
        either = "required, with `cluster` (or give a `snapshot`)"
        if request.trace is None:
            problems.append(Problem(path="trace", message=either))
        if request.cluster is None:
            problems.append(Problem(path="cluster", message="required, with `trace`"))
        if request.arrivals:
            problems.append(Problem(path="arrivals", message="only with a `snapshot`"))
    else:
        for name in ("trace", "cluster"):
            if getattr(request, name) is not None:
                problems.append(
                    Problem(
                        path=name,
                        message="not with a `snapshot` (its jobs to come are `arrivals`)",
                    )
                )
    if problems:
        raise invalid_request(problems)


class SimulateService:
    """Checks a what-if request, runs it in the process pool, answers the metrics."""

    def __init__(self, profiles: dict[str, Profile], limits: SimulateLimits) -> None:
        self.profiles = profiles
        self.limits = limits
        self._pool: ProcessPoolExecutor | None = None

    def _executor(self) -> ProcessPoolExecutor:
        # Started on first use: most replicas never simulate. `spawn`, not `fork`: the
        # service process runs threads, which a forked child would inherit half-held.
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                max_workers=self.limits.processes,
                mp_context=multiprocessing.get_context("spawn"),
            )
        return self._pool

    def _stop_workers(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        for process in list(pool._processes.values()):  # no public way to stop a running task
            process.terminate()
        pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def check(self, body: bytes) -> SimulateRequest:
        """The request, or a 422 (404 for an unknown profile) before any worker is busy."""
        request = _parse(body)
        _check_form(request)
        limits = self.limits
        problems = []
        jobs = _job_count(request)
        if jobs > limits.max_jobs:
            what = "rows" if request.snapshot is None else "jobs and arrivals"
            problems.append(
                Problem(
                    path="trace" if request.snapshot is None else "snapshot.jobs",
                    message=(
                        f"{jobs:,} {what}; at most {limits.max_jobs:,} (ARBITER_SIMULATE_MAX_JOBS)"
                    ),
                )
            )
        if request.cluster is not None:
            nodes, where = sum(g.count for g in request.cluster.node_groups), "cluster.node_groups"
        else:
            listed = (request.snapshot or {}).get("nodes")
            nodes, where = (len(listed) if isinstance(listed, list) else 0), "snapshot.nodes"
        if nodes > limits.max_nodes:
            problems.append(
                Problem(
                    path=where,
                    message=f"{nodes:,} nodes; at most {limits.max_nodes:,} (ARBITER_MAX_NODES)",
                )
            )
        if len(request.profiles) > limits.max_profiles:
            problems.append(
                Problem(
                    path="profiles",
                    message=(
                        f"{len(request.profiles)} profiles; at most {limits.max_profiles} "
                        "(ARBITER_SIMULATE_MAX_PROFILES)"
                    ),
                )
            )
        if problems:
            raise InvalidRequestError(
                f"the simulation is larger than this service runs: {problems[0].message}",
                problems,
            )
        unknown = [name for name in request.profiles if name not in self.profiles]
        if unknown:
            known = ", ".join(sorted(self.profiles))
            raise NotFoundError(f"unknown profile {unknown[0]!r}; known: {known}")
        try:
            _trace(request)
            _rows(request.arrivals, "arrivals")
        except TraceError as error:
            path = f"{error.path}[{error.line}]" + (f".{error.field}" if error.field else "")
            raise InvalidRequestError(
                str(error), [Problem(path=path, message=str(error))]
            ) from error
        try:
            _workload(request).check()
        except WorkloadError as error:
            raise InvalidRequestError(
                str(error), [Problem(path="workload", message=str(error))]
            ) from error
        if request.snapshot is not None:
            try:
                _start(request, _snapshot(request.snapshot))
            except StateError as error:
                raise invalid_request(
                    [Problem(path=path, message=message) for path, message in error.problems]
                ) from error
        return request

    async def simulate(self, body: bytes) -> dict[str, Any]:
        request = self.check(body)
        payload = request.model_dump(mode="json")
        profiles = {name: self.profiles[name].model_dump(mode="json") for name in request.profiles}
        loop = asyncio.get_running_loop()
        grace = _BACKSTOP_GRACE_S + (_COLD_START_GRACE_S if self._pool is None else 0.0)
        future = loop.run_in_executor(
            self._executor(), run_simulation, payload, profiles, self.limits.timeout_s
        )
        try:
            # The run stops itself at its deadline; this is the backstop for one that
            # cannot (a single decision longer than the limit): its worker is stopped.
            answer: dict[str, Any] = await asyncio.wait_for(future, self.limits.timeout_s + grace)
        except TimeoutError:
            self._stop_workers()
            answer = {"timeout": 0}
        except BrokenProcessPool as error:
            self._pool = None
            raise UnavailableError(
                "the simulation's worker process stopped (another run past its time limit "
                "was stopped with it); send it again"
            ) from error
        if "timeout" in answer:
            raise InvalidRequestError(
                f"the simulation ran past {self.limits.timeout_s:g} s "
                f"(ARBITER_SIMULATE_TIMEOUT_S) after {answer['timeout']} of "
                f"{_job_count(request) * len(request.profiles)} job runs; send fewer jobs or "
                "profiles",
                [
                    Problem(
                        path="trace" if request.snapshot is None else "snapshot",
                        message="over ARBITER_SIMULATE_TIMEOUT_S",
                    )
                ],
            )
        if "invalid" in answer:
            path, message = answer["invalid"]
            raise InvalidRequestError(message, [Problem(path=path, message=message)])
        return answer
