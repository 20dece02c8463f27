"""POST /v1/simulate: a what-if run of the simulator under one or more profiles.

The request carries a small trace (rows of the shared trace schema), a cluster spec
(the schema of `shared/clusters`), the profiles and the workload options of
`arbiter simulate`; the answer is the simulator's metrics per profile, the same JSON
as `arbiter simulate --json`. The run is the simulator's own
(:func:`simulator.runner.simulate`) through the same engine as decisions.

Simulations are CPU-bound and may take seconds, so they run in a pool of worker
processes (`ARBITER_SIMULATE_PROCESSES`), never on the event loop or the decision
threads: a decision never waits behind one. Each is bounded: at most
`ARBITER_SIMULATE_MAX_JOBS` trace rows and `ARBITER_SIMULATE_MAX_PROFILES` profiles
(more is a 422 naming the limit), and `ARBITER_SIMULATE_TIMEOUT_S` seconds of run
time (a run past it stops and is a 422 naming the limit).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any

from app.errors import InvalidRequestError, NotFoundError, UnavailableError
from app.schemas import SimulateRequest
from app.services.decisions import parse_body
from policies.decision import Decision
from policies.model import Problem, Snapshot
from policies.profiles import Profile
from policies.reclaim_models import ReclaimRequest, ReclaimResult
from simulator.traces import TraceError, TraceJob, trace_from_rows
from simulator.workload import WorkloadError, WorkloadOptions


@dataclass(frozen=True)
class SimulateLimits:
    max_jobs: int = 2000
    max_profiles: int = 8
    timeout_s: float = 60.0
    processes: int = 1


_BACKSTOP_GRACE_S = 10.0


class SimulationTimeout(RuntimeError):
    """A run past its time limit (raised inside the worker process)."""


def _trace(request: SimulateRequest) -> list[TraceJob]:
    return trace_from_rows([row.model_dump(exclude_none=True) for row in request.trace])


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
    from simulator.runner import RunConfig, simulate  # noqa: PLC0415

    parsed = SimulateRequest.model_validate(request)
    trace = _trace(parsed)
    config = RunConfig(
        seed=parsed.seed,
        perf_mode=parsed.perf_model,
        workload=_workload(parsed),
        sim=SimOptions(round_period_s=parsed.round_period_s),
        inference=InferenceOptions(loan_idle=parsed.loan_idle),
    )
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
            self.engine = EngineDecider(Profile.model_validate(profiles[name]))

        def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
            if time.monotonic() > deadline:
                raise SimulationTimeout
            return self.engine(snapshot, seed, decision_id)

        def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
            return self.engine.reclaim(snapshot, request, seed)

    try:
        runs = simulate(
            trace,
            parsed.cluster,
            parsed.profiles,
            config,
            decider_for=TimedDecider,
            on_progress=on_progress,
        )
    except SimulationTimeout:
        return {"timeout": finished}
    except SimulationError as error:
        return {"invalid": ["trace", f"the simulation cannot go on: {error}"]}
    return results_json([(run.profile, run.result) for run in runs])


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
        request = parse_body(body, SimulateRequest)
        limits = self.limits
        problems = []
        if len(request.trace) > limits.max_jobs:
            problems.append(
                Problem(
                    path="trace",
                    message=(
                        f"{len(request.trace):,} rows; at most {limits.max_jobs:,} "
                        "(ARBITER_SIMULATE_MAX_JOBS)"
                    ),
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
        except TraceError as error:
            path = f"trace[{error.line}].{error.field}"
            raise InvalidRequestError(
                str(error), [Problem(path=path, message=str(error))]
            ) from error
        try:
            _workload(request).check()
        except WorkloadError as error:
            raise InvalidRequestError(
                str(error), [Problem(path="workload", message=str(error))]
            ) from error
        return request

    async def simulate(self, body: bytes) -> dict[str, Any]:
        request = self.check(body)
        payload = request.model_dump(mode="json")
        profiles = {name: self.profiles[name].model_dump(mode="json") for name in request.profiles}
        loop = asyncio.get_running_loop()
        future = loop.run_in_executor(
            self._executor(), run_simulation, payload, profiles, self.limits.timeout_s
        )
        try:
            # The run stops itself at its deadline; this is the backstop for one that
            # cannot (a single decision longer than the limit): its worker is stopped.
            answer: dict[str, Any] = await asyncio.wait_for(
                future, self.limits.timeout_s + _BACKSTOP_GRACE_S
            )
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
                f"{len(request.trace) * len(request.profiles)} job runs; send fewer jobs or "
                "profiles",
                [Problem(path="trace", message="over ARBITER_SIMULATE_TIMEOUT_S")],
            )
        if "invalid" in answer:
            path, message = answer["invalid"]
            raise InvalidRequestError(message, [Problem(path=path, message=message)])
        return answer
