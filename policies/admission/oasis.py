"""OASiS admission: admit a job if its best schedule's utility exceeds its priced cost.

The online rule of Bao, Peng, Wu and Li, "Online Job Scheduling in Distributed
Machine Learning Clusters" (INFOCOM 2018, §IV): on a job's arrival, find the
schedule of best payoff at the current resource prices (utility at completion
minus priced cost, :func:`policies.common.oasis.search_schedule`); admit the job if
that payoff is positive and commit the schedule, raising the prices of what it
uses; reject it otherwise. Jobs are judged in submission order, each at the
prices left by those admitted before it, in this round or earlier ones.

This policy writes the "oasis" policy state (:meth:`OasisAdmission.commit`):
the committed schedules and the price bounds, reconciled with the snapshot
each round. The OASiS scaling policy only reads it. Each verdict's `details`
carry the numbers (utility, priced cost, payoff, cost per resource, binding
resource, price bounds) and, for an admitted job, the committed plan, which
is how the plan reaches the scaling stage and the commit without recomputing.
The plan is there as the :class:`Plan` itself (it encodes as the same JSON
object): the stages after admission read it without a JSON round trip.

Not in the paper, and why:
- With no schedulable training node at all the job waits (DEFER) rather than
  being rejected: a cluster with every node down says nothing about the job.
- A job OASiS committed earlier that comes back not marked `admitted` (the
  caller did not record the verdict) is admitted again on its committed plan,
  not judged twice.
- A job that states no utility gets an implied one (`implied_value_per_gpu_hour`),
  so that one market prices every job; 0 rejects such jobs instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import ClassVar

from pydantic import JsonValue

from policies.common.oasis import (
    RESOURCES,
    STATE_KEY,
    JobModel,
    Market,
    OasisParams,
    OasisState,
    Plan,
    Schedule,
    estimate_bounds,
    job_utility,
    load_state,
    merge_bounds,
    model_job,
    plan_from_details,
    plan_of,
    reconcile,
    search_schedule,
)
from policies.common.wording import counted
from policies.decision import AdmissionResult, Decision, Stage, Verdict
from policies.model import Assignment, Job, JobState
from policies.protocols import Context


class OasisAdmission:
    name: ClassVar[str] = "oasis"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ADMISSION
    summary: ClassVar[str] = (
        "Admit a job if the utility of its best schedule exceeds the schedule's cost at "
        "exponential resource prices; commit the schedule."
    )
    source: ClassVar[str] = (
        "Bao, Peng, Wu, Li, OASiS, 'Online Job Scheduling in Distributed Machine Learning "
        "Clusters', INFOCOM 2018, §IV."
    )
    Params: ClassVar[type[OasisParams]] = OasisParams
    state_key: ClassVar[str] = STATE_KEY

    def __init__(self, params: OasisParams) -> None:
        self.params = params

    def admit(self, ctx: Context, jobs: Sequence[Job]) -> list[AdmissionResult]:
        if not jobs:
            return []
        params = self.params
        snapshot = ctx.snapshot
        state = load_state(ctx.state.get(STATE_KEY), params.slot_s)
        horizon_end = (math.floor(snapshot.now / params.slot_s) + params.horizon_slots) * (
            params.slot_s
        )
        floor, ceiling = merge_bounds(
            state, *estimate_bounds(snapshot, params, horizon_end), params
        )
        bounds: dict[str, JsonValue] = {
            "slot_s": params.slot_s,
            "floor": _by_resource(floor),
            "ceiling": _by_resource(ceiling),
        }
        market: Market | None = None
        out = []
        for job in jobs:
            # A schedule search per job: thousands of new jobs can outrun a decision's
            # CPU budget, and then the fallback admits the rest (the engine says so).
            ctx.check_budget()
            committed = state.jobs.get(job.id)
            if committed is not None:
                out.append(
                    AdmissionResult(
                        job_id=job.id,
                        verdict=Verdict.ADMIT,
                        reason="OASiS: already committed in an earlier round; keeps its schedule",
                        details={**bounds, "plan": committed},
                    )
                )
                continue
            utility, implied = job_utility(job, params)
            if utility is None:
                out.append(
                    AdmissionResult(
                        job_id=job.id,
                        verdict=Verdict.REJECT,
                        reason=(
                            "OASiS: the job states no utility and implied_value_per_gpu_hour "
                            "is 0, so nothing can pay for its resources"
                        ),
                        details=bounds,
                    )
                )
                continue
            if market is None:
                market = Market.build(snapshot, params, state, (floor, ceiling))
            if market.size == 0:
                out.append(
                    AdmissionResult(
                        job_id=job.id,
                        verdict=Verdict.DEFER,
                        reason="OASiS: no training node is schedulable now",
                        details=bounds,
                    )
                )
                continue
            model = model_job(job, utility, implied, params, market.models)
            out.append(self._judge(market, model, bounds))
        return out

    def _judge(
        self, market: Market, model: JobModel, bounds: dict[str, JsonValue]
    ) -> AdmissionResult:
        job = model.job
        implied = " (implied: the job states none)" if model.implied else ""
        search = search_schedule(market, model)
        best = search.best
        if best is None:
            return AdmissionResult(
                job_id=job.id,
                verdict=Verdict.REJECT,
                reason=f"OASiS: no schedule within the horizon: {search.reason}",
                details=bounds,
            )
        numbers = _numbers(market, best)
        binding = str(numbers["binding_resource"])
        after = best.completion_s - job.submit_time
        if best.payoff <= 0:
            return AdmissionResult(
                job_id=job.id,
                verdict=Verdict.REJECT,
                reason=(
                    f"OASiS: utility {best.utility:.4g}{implied} at its best completion "
                    f"({after / 3600:.2f} h after submission) does not cover the priced cost "
                    f"{best.cost:.4g} of that schedule (payoff {best.payoff:.4g}); the binding "
                    f"resource is {binding} ({_share(best, binding):.0%} of the cost)"
                ),
                details={**bounds, **numbers},
            )
        plan = plan_of(best)
        market.commit(model, best)
        first = best.segments[0]
        t = first.first - market.first_slot  # its first slot of the horizon
        wait = market.slot_end(t - 1) - market.now
        starts = "now" if t == 0 else f"in slot {first.first} (in {wait:g} s)"
        return AdmissionResult(
            job_id=job.id,
            verdict=Verdict.ADMIT,
            reason=(
                f"OASiS: utility {best.utility:.4g}{implied} at completion "
                f"({after / 3600:.2f} h after submission) exceeds the priced cost "
                f"{best.cost:.4g} (payoff {best.payoff:.4g}); starts {starts} with "
                f"{counted(first.workers, 'worker')}"
                + (f" and {counted(first.ps, 'parameter server')}" if first.ps else "")
                + f"; binding resource {binding}"
            ),
            details={**bounds, **numbers, "plan": plan},
        )

    def commit(self, ctx: Context, decision: Decision) -> OasisState:
        """The state after `decision`: plans reconciled with the snapshot, new ones added.

        - A job no longer in the snapshot has finished (or left): its plan goes.
        - Slots before the current one are cut off.
        - The current slot of a job that runs after this decision (its placement in
          the decision, or in the snapshot when placement was not requested) becomes
          what it really runs: the snapshot and the engine win over the plan.
        - Jobs admitted this round add the plan their verdict carries.
        - The price bounds become those this round's admission used.

        Returned as the Struct: it is stored as the JSON it encodes to, and a caller
        that keeps it in memory hands it back to the next round without a round trip.
        """
        params = self.params
        snapshot = ctx.snapshot
        state = load_state(ctx.state.get(STATE_KEY), params.slot_s)
        current = math.floor(snapshot.now / params.slot_s)
        jobs = snapshot.jobs_by_id
        runs: dict[str, tuple[Assignment, ...]]
        if Stage.PLACEMENT in decision.stages:
            runs = {entry.job_id: entry.assignments for entry in decision.placement}
        else:
            runs = {j.id: j.placement for j in snapshot.jobs if j.state is JobState.RUNNING}
        plans: dict[str, Plan] = dict(state.jobs)
        floor, ceiling = state.floor, state.ceiling
        # Every verdict of a round carries the same bounds, mostly the very same dicts:
        # reading one again gives what it gave (the last readable bounds win).
        read_floor: JsonValue = None
        read_ceiling: JsonValue = None
        for entry in decision.admission:
            if "floor" in entry.details and "ceiling" in entry.details:
                raw_floor, raw_ceiling = entry.details["floor"], entry.details["ceiling"]
                if raw_floor is not read_floor or raw_ceiling is not read_ceiling:
                    floor = _from_resources(raw_floor) or floor
                    ceiling = _from_resources(raw_ceiling) or ceiling
                    read_floor, read_ceiling = raw_floor, raw_ceiling
            plan = plan_from_details(entry.details) if entry.admitted else None
            if plan is not None and entry.job_id not in plans:
                plans[entry.job_id] = plan
        kept: dict[str, Plan] = {}
        for job_id, plan in plans.items():
            job = jobs.get(job_id)
            if job is None:
                continue
            kept[job_id] = reconcile(plan, current, runs.get(job_id), job.gpus_per_worker, job.ps)
        return OasisState(slot_s=params.slot_s, floor=floor, ceiling=ceiling, jobs=kept)


def _by_resource(values: Iterable[float]) -> dict[str, JsonValue]:
    return {name: float(v) for name, v in zip(RESOURCES, values, strict=True)}


def _from_resources(raw: JsonValue) -> tuple[float, float, float] | None:
    if not isinstance(raw, dict):
        return None
    values = [raw.get(name) for name in RESOURCES]
    numbers = [float(v) for v in values if isinstance(v, (int, float))]
    if len(numbers) != len(RESOURCES):
        return None
    return (numbers[0], numbers[1], numbers[2])


def _numbers(market: Market, best: Schedule) -> dict[str, JsonValue]:
    # Three numbers: as plain floats, Python compares them in less time than NumPy
    # takes to start a call.
    by_resource = best.cost_by_resource.tolist()
    # The resource that carries most of the priced cost is the one that binds (the
    # first of equal ones, as argmax picks it).
    binding = RESOURCES[by_resource.index(max(by_resource))] if any(by_resource) else RESOURCES[0]
    return {
        "utility": best.utility,
        "cost": best.cost,
        "payoff": best.payoff,
        "completion_s": best.completion_s,
        "binding_resource": binding,
        "cost_by_resource": _by_resource(by_resource),
    }


def _share(best: Schedule, resource: str) -> float:
    total = best.cost
    if total <= 0:
        return 0.0
    return float(best.cost_by_resource[RESOURCES.index(resource)]) / total
