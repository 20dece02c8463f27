"""OASiS: price-based online scheduling of parameter-server training jobs.

Bao, Peng, Wu and Li, "Online Job Scheduling in Distributed Machine Learning
Clusters", INFOCOM 2018. The model is the paper's §III (jobs of workers and
parameter servers, time slots, per-server capacities, a utility that does not
grow with completion time); the algorithm is its §IV: the problem rewritten
over whole *schedules* of a job, whose dual prices every resource of every
server in every slot, and an online rule that, when a job arrives, finds the
job's schedule of best payoff (utility minus priced cost), admits the job if
that payoff is positive, commits the schedule and raises the prices it uses.
:mod:`policies.admission.oasis` and :mod:`policies.scaling.oasis` serve it; this
module is the shared machinery (no I/O). docs/oasis.md has the full account.

Prices. Resource k (GPU, CPU, memory; the snapshot says nothing of bandwidth)
of server h in slot t costs, per unit and slot,

    p = L_k · (U_k / L_k) ^ (g / c)

where g is the committed use and c the capacity: L_k on an idle resource, U_k
on a full one. As in the paper, U_k is the most utility any job can earn per
unit of resource k (its best utility over what one of its workers, or one
parameter server, holds of k), so a full resource prices out every job, and
L_k is a fraction 1/(4η) of the least utility any job earns per unit of
resource-time it needs, so an idle cluster prices every job well below its
utility. The paper takes both as known bounds over all jobs; a stateless service
cannot know them, so they are estimated from the snapshot's jobs and kept as
running extremes in the state (U only grows, L only falls). See
:func:`estimate_bounds` for the details and the deviations.

The schedule subroutine. For a job, and for each slot t of the horizon, the
cheapest way to run y workers (and the parameter servers they need) is found
greedily at the prices of the moment: workers go to the servers where one more
worker costs least, as many as fit, then parameter servers likewise on what is
left (:meth:`Market.slot_costs`). A dynamic programme over the slots then picks
how many workers to run in each slot so that the job's work is done at least
cost, for every candidate completion slot at once: its state is the work done
so far, cut into units. The paper values a schedule at the end of its last slot;
we value it when its work is done inside that slot (the work left over the slot's
rate), since with half-hour slots a job of minutes whose utility is gone within a
slot would be worth nothing (`OasisParams.completion_value` keeps the paper's
rule). So for each last slot t and each way into it (the work done before it, the
count it runs), payoff = utility(when done) − least cost of that way; the best
wins, and a finish after slot t is worth at most utility(end of t), which bounds
the search. Jobs with no parameter servers to place (nearly all) get the same
layouts from each slot's servers kept ranked by one worker's cost
(:meth:`Market.ranked`), walked slot by slot only as far as the search reaches.
Two rules keep the programme to what Arbiter can carry out: a job runs in
consecutive slots once started (scaling never preempts a running job), and in
the current, partly elapsed slot it pays and works pro rata.

Work. A job's work left is measured in seconds at its requested size
(:meth:`Job.remaining_time_s`, or `default_duration_s` when it gives no
estimate). With y workers and s parameter servers it progresses per second at
speedup(y)/speedup(requested) · min(1, s·γ/y), relative to the requested
configuration, where γ is the worker:PS ratio (`Job.workers_per_ps`, by default
the requested workers/ps): the paper's constraint that a server feeds at most γ
workers becomes a bottleneck once `max_ps` caps the servers. The programme
always gives y workers ⌈y/γ⌉ servers (within `max_ps`).

State (key "oasis", one JSON value per cluster): the committed schedule of
every job OASiS admitted, as runs of identical slots with their per-server
layout, plus the price bounds. Each round it is reconciled with the snapshot,
which wins: jobs gone from the snapshot are dropped, past slots are cut, and
the current slot of every job that runs after the decision is overwritten by
what it really runs. Running jobs OASiS did not plan (admitted by another
policy, or state lost) still load the prices: they hold their GPUs now and are
assumed to keep them for their estimated remaining time.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Annotated, Literal

import msgspec
import numpy as np
import numpy.typing as npt
from msgspec import Meta
from msgspec.structs import replace
from pydantic import BaseModel, ConfigDict, Field

from policies.common._oasis import (
    Column,
    MarketCells,
    OneCount,
    ServerNames,
    SlotRank,
    SlotSearch,
    UtilityCurve,
    numpy_sum,
    price_bounds,
    programme_best_finish,
    programme_step,
    ranked_costs,
    ranked_layouts,
    search_counts,
    search_one_count,
)
from policies.common.wording import counted
from policies.model import (
    Assignment,
    Frozen,
    Job,
    JobState,
    SigmoidUtility,
    Snapshot,
    StepUtility,
    Utility,
    convert,
)
from policies.protocols import StateValue

STATE_KEY = "oasis"
RESOURCES: tuple[str, ...] = ("gpu", "cpu", "memory")
_K = len(RESOURCES)
_EPS = 1e-9

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class OasisParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    slot_s: float = Field(
        default=1800.0,
        ge=60.0,
        description=(
            "Length of a time slot, seconds. Prices and schedules are per slot; a job's "
            "worker count changes only at slot boundaries."
        ),
    )
    horizon_slots: int = Field(
        default=336,
        ge=1,
        le=4096,
        description=(
            "Slots planned ahead, the current one included (default: a week of half "
            "hours). A job that cannot finish within it is rejected."
        ),
    )
    eta: float = Field(
        default=1.0,
        gt=0,
        description=(
            "The paper's η: the price floor L is 1/(4η) of the least utility a job earns "
            "per unit of resource-time, so an idle cluster prices a job at most 1/(4η) "
            "of its utility."
        ),
    )
    max_price_ratio: float = Field(
        default=1e12,
        gt=1,
        description=(
            "Cap on U/L per resource: a job whose utility is nearly zero at the horizon's "
            "end would otherwise push the floor towards zero (the paper assumes U/L finite)."
        ),
    )
    work_units: int = Field(
        default=512,
        ge=16,
        le=8192,
        description=(
            "Resolution of the dynamic programme: a job's remaining work is cut into at "
            "most this many units (each slot's work is rounded down to whole units)."
        ),
    )
    default_duration_s: float = Field(
        default=3600.0,
        gt=0,
        description="Run time assumed at the requested size for a job with no estimate.",
    )
    implied_value_per_gpu_hour: float = Field(
        default=1.0,
        ge=0,
        description=(
            "A job that states no utility is worth this much per GPU-hour it requests, "
            "decaying as a sigmoid (see `implied_midpoint_factor`); 0 rejects such jobs."
        ),
    )
    completion_value: Literal["within_slot", "slot_end"] = Field(
        default="within_slot",
        description=(
            "When a schedule's utility is counted: `within_slot`, when its work is done "
            "inside its last slot (the work left over that slot's rate); `slot_end`, at "
            "the end of that slot, as in the paper's slotted model, which makes a job "
            "shorter than a slot worth nothing when its utility is gone within one."
        ),
    )
    implied_midpoint_factor: float = Field(
        default=2.0,
        gt=0,
        description=(
            "The implied utility's midpoint, in multiples of the job's requested run time "
            "after submission: finishing then is worth half."
        ),
    )


# -- the state, as JSON -----------------------------------------------------------------------


class Segment(Frozen, frozen=True):
    """Consecutive slots `[first, until)` run with one layout (absolute slot numbers)."""

    first: int
    until: int
    workers: Annotated[int, Meta(ge=0)]
    ps: Annotated[int, Meta(ge=0)]
    nodes: Annotated[
        tuple[tuple[str, int, int], ...],
        Meta(description="(node id, workers, parameter servers) on each node used."),
    ] = ()


class Plan(Frozen, frozen=True):
    """A job's committed schedule and the numbers it was admitted on."""

    segments: tuple[Segment, ...] = ()
    utility: float = 0.0
    cost: float = 0.0

    def segment_at(self, slot: int) -> Segment | None:
        for segment in self.segments:
            if segment.first <= slot < segment.until:
                return segment
        return None

    def next_start(self, slot: int) -> int | None:
        """First slot at or after `slot` in which the plan runs workers."""
        starts = [max(s.first, slot) for s in self.segments if s.until > slot and s.workers > 0]
        return min(starts) if starts else None


class OasisState(Frozen, frozen=True):
    """The state's value. Its parts are msgspec Structs like the domain model: a round
    builds, reconciles and writes back hundreds of plans (one per admitted job of a large
    snapshot), and reads back those its admission put in the verdicts; as pydantic models
    that validation and copying cost a good part of the decision. Values from outside
    (the stored state, a verdict's details) are validated by :func:`convert`."""

    version: Literal[1] = 1
    slot_s: float | None = None
    floor: tuple[float, float, float] | None = None
    ceiling: tuple[float, float, float] | None = None
    jobs: dict[str, Plan] = msgspec.field(default_factory=dict)


def load_state(raw: StateValue | None, slot_s: float | None = None) -> OasisState:
    """The state as kept; empty when absent or unreadable.

    As the commit returned it (a caller that keeps state in memory), or as the JSON
    data it is stored as (validated). Plans made with another slot length are dropped
    (their slot numbers mean other times); the price bounds are kept.
    """
    if raw is None:
        return OasisState(slot_s=slot_s)
    if isinstance(raw, OasisState):
        state = raw
    else:
        try:
            state = convert(raw, OasisState)
        except msgspec.ValidationError:
            # Unreadable state (an older format, a hand edit): start afresh rather than
            # fail every decision; the snapshot still says what runs.
            return OasisState(slot_s=slot_s)
    if slot_s is not None and state.slot_s != slot_s:
        return replace(state, slot_s=slot_s, jobs={})
    return state


def plan_from_details(details: Mapping[str, object]) -> Plan | None:
    """The plan an OASiS admission put in its verdict's details, if any (None if unreadable).

    Admission puts the :class:`Plan` itself there (it encodes as the JSON object the
    decision shows), so the stages after it read it as is; a plan given as JSON data
    (a verdict built elsewhere) is validated."""
    raw = details.get("plan")
    if raw is None or isinstance(raw, Plan):
        return raw
    try:
        return convert(raw, Plan)
    except msgspec.ValidationError:
        return None


# -- jobs ---------------------------------------------------------------------------------------


def worker_demand(job: Job) -> FloatArray:
    return np.array(
        [job.gpus_per_worker, job.cpus_per_worker, job.memory_gb_per_worker], dtype=np.float64
    )


def ps_demand(job: Job) -> FloatArray:
    if job.ps == 0:
        return np.zeros(_K)
    return np.array([0.0, job.ps_cpus, job.ps_memory_gb], dtype=np.float64)


def requested_duration_s(job: Job, params: OasisParams) -> float:
    return job.estimated_duration_s or params.default_duration_s


def remaining_at_request_s(job: Job, params: OasisParams) -> float:
    """Seconds of work left at the requested size (never below one second)."""
    left = job.remaining_time_s()
    if left is None:
        if job.total_work is not None:
            left = params.default_duration_s * (1.0 - job.progress())
        else:
            left = params.default_duration_s - job.executed_time_s
    return max(1.0, left)


def job_utility(job: Job, params: OasisParams) -> tuple[Utility | None, bool]:
    """The job's utility, or the implied one when it states none; and whether implied."""
    if job.utility is not None:
        return job.utility, False
    if params.implied_value_per_gpu_hour <= 0:
        return None, False
    duration = requested_duration_s(job, params)
    value = params.implied_value_per_gpu_hour * job.gpus * duration / 3600.0
    return (
        SigmoidUtility(
            value=value, midpoint_s=params.implied_midpoint_factor * duration, steepness=1.0
        ),
        True,
    )


class JobModel(msgspec.Struct, frozen=True, kw_only=True):
    """What the subroutine needs of a job: its options, their speed, demands and value.

    This, `SlotRun`, `Schedule` and `Search` are built once or more per judged job, so
    they are frozen msgspec Structs: a frozen dataclass's constructor sets every field
    through `object.__setattr__`, several times slower. Built here only, never from
    outside, so nothing is validated."""

    job: Job
    utility: Utility
    implied: bool
    counts: IntArray
    """Worker counts it accepts, ascending."""
    ps: IntArray
    """Parameter servers at each count (⌈count/γ⌉ within max_ps; 0 for all-reduce jobs)."""
    speed: FloatArray
    """Progress per second at each count, relative to the requested configuration."""
    remaining_s: float
    """Work left, in seconds at the requested configuration."""
    worker_demand: FloatArray
    ps_demand: FloatArray
    shape: tuple[object, ...] = ()
    """What `counts` to `ps_demand` are computed from (:func:`job_shape`); () when not
    known. Jobs of one shape share those arrays and the market's figures about them."""


def job_shape(job: Job) -> tuple[object, ...]:
    """The job's fields that its worker counts, servers, speeds and demands depend on."""
    return (
        # What `allowed_worker_counts` is worked out from, not the counts themselves: an
        # elastic job may accept thousands, and this runs for every job judged.
        job.min_workers,
        job.max_workers,
        job.worker_step,
        job.scaling_rule,
        job.workers,
        job.ps,
        job.workers_per_ps,
        job.max_ps,
        tuple(job.speedup.items()),
        job.gpus_per_worker,
        job.cpus_per_worker,
        job.memory_gb_per_worker,
        job.ps_cpus,
        job.ps_memory_gb,
    )


def model_job(
    job: Job,
    utility: Utility,
    implied: bool,
    params: OasisParams,
    shapes: dict[tuple[object, ...], JobModel] | None = None,
) -> JobModel:
    """What the subroutine needs of `job`. With `shapes` (a decision's models by shape),
    a job of a shape seen before shares that model's arrays (read-only) instead of
    computing them again."""
    remaining_s = remaining_at_request_s(job, params)
    if shapes is None:
        return _modelled(job, utility, implied, remaining_s, ())
    shape = job_shape(job)
    known = shapes.get(shape)
    if known is None:
        known = shapes[shape] = _modelled(job, utility, implied, remaining_s, shape)
        return known
    return JobModel(
        job=job,
        utility=utility,
        implied=implied,
        counts=known.counts,
        ps=known.ps,
        speed=known.speed,
        remaining_s=remaining_s,
        worker_demand=known.worker_demand,
        ps_demand=known.ps_demand,
        shape=shape,
    )


def _modelled(
    job: Job, utility: Utility, implied: bool, remaining_s: float, shape: tuple[object, ...]
) -> JobModel:
    counts = np.array(job.allowed_worker_counts(), dtype=np.int64)
    if job.ps == 0:
        ps = np.zeros_like(counts)
        factor = np.ones(len(counts))
        requested_factor = 1.0
    else:
        ratio = job.workers_per_ps or job.workers / job.ps
        need = np.maximum(1, np.ceil(counts / ratio - _EPS)).astype(np.int64)
        ps = need if job.max_ps is None else np.minimum(need, max(1, job.max_ps))
        # The paper's worker:PS constraint as a bottleneck: s servers feed s·γ workers.
        factor = np.minimum(1.0, ps * ratio / counts)
        requested_factor = min(1.0, job.ps * ratio / job.workers)
    base = max(job.speedup_at(job.workers), _EPS) * requested_factor
    speed = np.array(job.speedups_at(counts.tolist())) * factor / base
    return JobModel(
        job=job,
        utility=utility,
        implied=implied,
        counts=counts,
        ps=ps,
        speed=speed,
        remaining_s=remaining_s,
        worker_demand=worker_demand(job),
        ps_demand=ps_demand(job),
        shape=shape,
    )


def worker_costs(prices: FloatArray, demand: FloatArray) -> FloatArray:
    """One worker's cost at `prices` (last axis: resources): the price of each resource
    it needs times its demand, added in resource order.

    Written out rather than as ``prices @ demand``: a matrix product is BLAS's, whose
    order of additions and fused multiply-adds vary with the processor, and the same
    snapshot must get the same plan everywhere. The compiled ranks add the same terms in
    the same order."""
    needed = np.flatnonzero(demand > 0)
    if not len(needed):
        return np.zeros(prices.shape[:-1])
    first = int(needed[0])
    cost: FloatArray = prices[..., first] * demand[first]
    for k in needed[1:].tolist():
        cost = cost + prices[..., k] * demand[k]
    return cost


def _fitting(free: FloatArray, demand: FloatArray, cap: int) -> IntArray:
    """How many units of `demand` fit in `free` (last axis: resources), at most `cap`."""
    needed = np.flatnonzero(demand > 0)
    if not len(needed):
        return np.full(free.shape[:-1], cap, dtype=np.int64)
    if len(needed) == 1:
        # One resource (a GPU-only worker): the same figure without a copy and a min.
        k = int(needed[0])
        fits = np.floor(free[..., k] / demand[k] + _EPS)
    else:
        fits = np.floor(free[..., needed] / demand[needed] + _EPS).min(axis=-1)
    clipped: IntArray = np.minimum(np.maximum(fits, 0), cap).astype(np.int64)
    return clipped


# -- price bounds -------------------------------------------------------------------------------


def estimate_bounds(
    snapshot: Snapshot, params: OasisParams, horizon_end: float
) -> tuple[FloatArray, FloatArray]:
    """(L, U) per resource from the snapshot's jobs, as in the paper's §IV price design.

    - U_k = max over jobs of f(now) / d_k, where f(now) bounds the job's utility from
      above and d_k is the least it holds of resource k (one worker, or one parameter
      server): the paper's most utility per unit of resource.
    - L_k = min over jobs of f_late / (4η · n · R_k), where f_late is the least utility
      the job can still earn within the horizon, R_k the resource-slots of k it needs
      at its requested size, and n the count of resource types it uses: the paper's
      least utility per unit of resource-time, shared over the types the job uses so
      that an idle cluster prices it at most f_late/(4η) whatever the units. The paper's
      f_late is f(T − a), the utility at the horizon's end; for a deadline before that
      end it would be 0 and the floor with it, so a step utility counts its value as
      long as its deadline has not passed.
    A resource no job uses is free (L = U = 0); L is kept within [U/max_price_ratio, U].

    The loop over the jobs is compiled (`price_bounds`, policies/common/_oasis.pyx): a
    few microseconds of Python per job, thousands of jobs, every decision.
    """
    floor, ceiling = price_bounds(
        snapshot.jobs,
        snapshot.now,
        horizon_end,
        SigmoidUtility,
        params.implied_value_per_gpu_hour,
        params.default_duration_s,
        params.implied_midpoint_factor,
        params.slot_s,
        params.eta,
    )
    return _clamped(np.array(floor), np.array(ceiling), params)


def _clamped(
    floor: FloatArray, ceiling: FloatArray, params: OasisParams
) -> tuple[FloatArray, FloatArray]:
    floor = np.where(np.isfinite(floor), floor, ceiling / params.max_price_ratio)
    floor = np.clip(floor, ceiling / params.max_price_ratio, ceiling)
    return floor, ceiling


def merge_bounds(
    state: OasisState, floor: FloatArray, ceiling: FloatArray, params: OasisParams
) -> tuple[FloatArray, FloatArray]:
    """Running extremes: the widest bounds seen so far (the paper's are over all jobs)."""
    if state.ceiling is not None and state.floor is not None:
        old_floor, old_ceiling = np.array(state.floor), np.array(state.ceiling)
        ceiling = np.maximum(ceiling, old_ceiling)
        known = old_floor > 0
        floor = np.where(known & (floor > 0), np.minimum(floor, old_floor), floor)
        floor = np.where(known & (floor <= 0), old_floor, floor)
    return _clamped(floor, ceiling, params)


def price(
    used: FloatArray,
    capacity: FloatArray,
    floor: FloatArray,
    ceiling: FloatArray,
    ratio: FloatArray | None = None,
) -> FloatArray:
    """p = L · (U/L)^(used/capacity) per unit and slot; last axis: resources.

    The share is clamped to [0, 1]: a resource overcommitted by running jobs costs U,
    as does one of no capacity (nothing fits there anyway). `ratio` is U/L as
    :func:`price_ratio` gives it, when the caller keeps it.
    """
    # The divisions only where the divisor is positive (1 elsewhere), and the clamp by
    # minimum and maximum: the values np.where and np.clip gave, for a fraction of the
    # overhead on the few cells a commit reprices.
    share = np.divide(
        used,
        capacity,
        out=np.ones(np.broadcast_shapes(used.shape, capacity.shape)),
        where=capacity > 0,
    )
    if ratio is None:
        ratio = price_ratio(floor, ceiling)
    np.minimum(share, 1.0, out=share)
    np.maximum(share, 0.0, out=share)
    priced: FloatArray = floor * np.power(ratio, share)
    return priced


def price_ratio(floor: FloatArray, ceiling: FloatArray) -> FloatArray:
    """U/L per resource (1 where L is 0: such a resource is free)."""
    ratio: FloatArray = np.divide(ceiling, floor, out=np.ones(np.shape(floor)), where=floor > 0)
    return ratio


# -- the market ---------------------------------------------------------------------------------


@dataclass
class Frame:
    """What a block's layouts are made from, slot by slot (B slots, M candidate servers in
    the order workers fill them). A count's layout in a slot follows from these alone
    (:func:`_lay`), so a table keeps them instead of every count's layout: a job that
    accepts thousands of counts would otherwise hold B × counts × M of them."""

    fit: IntArray  # (B, M): workers that fit on each candidate (0: none, or a duplicate)
    before: IntArray  # (B, M): workers that fit on the candidates before it
    unit: FloatArray  # (B, M): one worker's cost on each candidate (0 where none fits)
    # Parameter servers, for a job that places them (else None): each candidate's free
    # resources, whether it repeats an earlier one, and one server's cost on it.
    free_at: FloatArray | None = None  # (B, M, K)
    duplicate: npt.NDArray[np.bool_] | None = None  # (B, M)
    ps_unit: FloatArray | None = None  # (B, M)
    # What every chunk of counts laid out on this frame reads (see `servers_room`).
    _servers: dict[tuple[bytes, bytes, int], tuple[IntArray, IntArray]] = field(
        default_factory=dict, repr=False, compare=False
    )

    def servers_room(self, model: JobModel, most_ps: int) -> tuple[IntArray, IntArray]:
        """For a job that places servers: (B, M, W + 1) the servers that fit on each
        candidate once `w` of its workers are there, for every w from 0 to the most workers
        a candidate takes (a handful); and (B, M) the candidates in order of one server's
        cost (ties by position). Worked out once per frame, not per chunk of counts."""
        key = (model.worker_demand.tobytes(), model.ps_demand.tobytes(), most_ps)
        kept = self._servers.get(key)
        if kept is not None:
            return kept
        assert self.free_at is not None
        assert self.duplicate is not None
        assert self.ps_unit is not None
        on_one = np.arange((int(self.fit.max()) if self.fit.size else 0) + 1)
        # Each candidate's leftovers with w workers, exactly as a count's layout leaves
        # them (the same products and differences), then the servers that fit there.
        left = self.free_at[:, :, None, :] - on_one[None, None, :, None] * model.worker_demand
        room = np.where(self.duplicate[:, :, None], 0, _fitting(left, model.ps_demand, most_ps))
        kept = room, np.argsort(self.ps_unit, axis=1, kind="stable")
        self._servers[key] = kept
        return kept

    def rows(self, stale: IntArray, fresh: Frame) -> Frame:
        """A copy with the slots `stale` taken from `fresh` (made for those slots)."""
        merged = {}
        for name in ("fit", "before", "unit", "free_at", "duplicate", "ps_unit"):
            mine, theirs = getattr(self, name), getattr(fresh, name)
            if mine is not None and theirs is not None:
                mine = mine.copy()
                mine[stale] = theirs
            merged[name] = mine
        return Frame(**merged)


@dataclass
class SlotCosts:
    """Cheapest layout of each worker count in a block of slots (see Market.slot_costs)."""

    cost: FloatArray  # (B, Y): full-slot cost; inf where it does not fit
    nodes: IntArray  # (B, M): candidate servers, in order of a worker's cost
    frame: Frame  # what each count's layout on them follows from
    # The layouts themselves, workers and servers (B, Y', M) for the first Y' counts,
    # when they were laid out at once (few counts, the common case); else derived
    # from `frame` for the slots a schedule runs.
    laid: tuple[IntArray, IntArray | None] | None = None


def _merged(
    kept: tuple[IntArray, IntArray | None] | None,
    fresh: tuple[IntArray, IntArray | None] | None,
    stale: IntArray,
) -> tuple[IntArray, IntArray | None] | None:
    """Layouts `kept` with the slots `stale` taken from `fresh`; None (derive them from
    the frame) when either is missing or they lay out different numbers of counts."""
    if kept is None or fresh is None or kept[0].shape[1] != fresh[0].shape[1]:
        return None
    workers = kept[0].copy()
    workers[stale] = fresh[0]
    if kept[1] is None or fresh[1] is None:
        return workers, None
    servers = kept[1].copy()
    servers[stale] = fresh[1]
    return workers, servers


_LAID_AT_ONCE = 1 << 18
"""Most (slot, count, candidate) cells :meth:`Market.layouts` works on at once: counts
are laid out in chunks of this size, which keeps a job of thousands of counts on
thousands of servers within a few megabytes (and in the processor's caches)."""


def _lay(
    frame: Frame,
    counts: IntArray,
    ps: IntArray,
    model: JobModel,
    most_ps: int,
) -> tuple[FloatArray, npt.NDArray[np.bool_], IntArray, IntArray | None]:
    """The layout of each of `counts` (with `ps` servers) in each slot of `frame`: its
    full-slot cost, whether it fits, and the workers and servers on each candidate,
    shaped (B, len(counts)[, M]). Every figure of a count comes from its own row, so a
    count gets the same numbers alone as among others."""
    fit, unit = frame.fit, frame.unit
    workers: IntArray = np.minimum(
        np.maximum(counts[None, :, None] - frame.before[:, None, :], 0), fit[:, None, :]
    )
    cost: FloatArray = (workers * unit[:, None, :]).sum(axis=2)
    fits = fit.sum(axis=1)[:, None] >= counts[None, :]
    if frame.free_at is None or frame.duplicate is None or frame.ps_unit is None:
        return cost, fits, workers, None
    # Servers fill the candidates with room in order of one server's cost (ties by
    # position), each up to its room, until the count's servers are placed. That order
    # is the same for every count: the counts are laid out on it (candidates without
    # room take nothing and change no running total), and only the paid servers' costs
    # are gathered to the front, in that order, to be added up as a sort of the
    # candidates per count (those with room first) lined them up for NumPy's sum.
    by_workers, by_unit = frame.servers_room(model, most_ps)
    blocks, width = fit.shape
    steps = by_workers.shape[2]
    slot_rows = np.arange(blocks).reshape(blocks, 1, 1) * width
    in_order = slot_rows + by_unit[:, None, :]  # (B, 1, M): candidate positions, cost order
    # (B, Y, M): each count's cells, candidates in cost order.
    cells = np.arange(blocks * len(counts)).reshape(blocks, len(counts), 1) * width
    cells = cells + by_unit[:, None, :]
    workers_u = workers.reshape(-1)[cells]
    room_u: IntArray = by_workers.reshape(-1)[in_order * steps + workers_u]  # (B, Y, M)
    placed = np.clip(ps[None, :, None] - (np.cumsum(room_u, axis=2) - room_u), 0, room_u)
    fits &= room_u.sum(axis=2) >= ps[None, :]
    paid = placed * frame.ps_unit.reshape(-1)[in_order]
    # The paid candidates number at most the count's servers: NumPy's sum of them, lined
    # up at the front of M places, is its sum over the first 8 places (M if fewer) when
    # they fit in 8, its eight partial sums then holding one term each.
    lined = np.zeros((blocks, len(counts), width if most_ps > 8 else min(width, 8)))
    paying = placed > 0
    b, y, m = np.nonzero(paying)
    lined[b, y, (np.cumsum(paying, axis=2) - 1)[b, y, m]] = paid[b, y, m]
    cost = cost + lined.sum(axis=2)
    on_each: IntArray = np.zeros_like(placed)
    on_each.reshape(-1)[cells] = placed
    return cost, fits, workers, on_each


class Market:
    """Committed use and prices of every resource of every server in every slot ahead.

    Slot 0 is the current one (absolute number `first_slot`), partly elapsed: a
    schedule works and pays in it pro rata, for `first_fraction` of the slot.
    Arrays are (slots, servers, resources); servers are the snapshot's nodes that
    training may use, in snapshot order.
    """

    def __init__(
        self,
        params: OasisParams,
        now: float,
        nodes: Sequence[tuple[str, float, float, float, float]],
        bounds: tuple[FloatArray, FloatArray],
    ) -> None:
        self.params = params
        self.now = now
        self.first_slot = math.floor(now / params.slot_s)
        # The share of the current slot still ahead, in which a schedule works and pays.
        self.first_fraction = max(_EPS, self.slot_end(0) - now) / params.slot_s
        self.node_ids = [n[0] for n in nodes]
        self.index = {node_id: h for h, node_id in enumerate(self.node_ids)}
        self.capacity = np.array([n[1:4] for n in nodes], dtype=np.float64).reshape(-1, _K)
        self.gpu_memory = np.array([n[4] for n in nodes], dtype=np.float64)
        self.floor, self.ceiling = bounds
        self.ratio = price_ratio(self.floor, self.ceiling)
        # The floor and the ratio repeated row by row, as many rows as servers at least:
        # sliced for a block's servers (:meth:`priced`) and a commit's cells (grown
        # when a commit has more).
        self._floor_rows, self._ratio_rows = self._repeated(max(len(nodes), 64))
        self.used = np.zeros((params.horizon_slots, len(nodes), _K))
        # Prices are computed for the slots searches reach, a growing block at a time
        # (:meth:`priced`): most jobs look a few slots ahead of a week-long horizon.
        self._prices = np.zeros_like(self.used)
        self._priced_until = 0
        # What is left of each resource, kept with `used` (load, commit), computed like
        # the prices for the slots searches reach (:meth:`freed`).
        self.free = np.empty_like(self.used)
        self._free_until = 0
        self._too_small: dict[float, npt.NDArray[np.bool_] | None] = {}
        # Slot costs are computed slot by slot from that slot's prices and use alone, so
        # a job shape's table stays valid in every slot no commit has touched since:
        # `_touched[t]` counts the commits that changed slot t, and `_tables` keeps, per
        # job shape and block, the table and the counts it was computed at.
        self._touched = np.zeros(params.horizon_slots, dtype=np.int64)
        # The arrays a commit writes, as the compiled part holds them (never replaced).
        self._cells = MarketCells(self.used, self.capacity, self._prices, self.free, self._touched)
        self._commits = 0
        self._tables: dict[tuple[object, ...], tuple[IntArray, SlotCosts]] = {}
        # Per job shape (JobModel.shape), for this decision: its model, and what its
        # searches read, the ranked form's ladder included (prices' floors are fixed for
        # the decision).
        self.models: dict[tuple[object, ...], JobModel] = {}
        self._figures: dict[tuple[object, ...], _Figures] = {}
        # The ranked form of the search (:meth:`ranked`): per slot, every resource of
        # every server and its rankings, made when a job first asks and kept in step by
        # `commit`.
        self._columns: dict[int, Column] = {}
        self._small_flags: dict[float, bytes | None] = {}

    @classmethod
    def build(
        cls,
        snapshot: Snapshot,
        params: OasisParams,
        state: OasisState,
        bounds: tuple[FloatArray, FloatArray],
    ) -> Market:
        nodes = [
            (n.id, float(n.gpus), float(n.cpus), n.memory_gb, n.gpu_memory_gb)
            for n in snapshot.nodes
            if n.schedulable_for_training
        ]
        market = cls(params, snapshot.now, nodes, bounds)
        market.load(snapshot, state)
        return market

    @property
    def prices(self) -> FloatArray:
        """The price of every resource of every server in every slot ahead."""
        return self.priced(self.horizon)

    def priced(self, stop: int) -> FloatArray:
        """The prices, computed at least for slots `[0, stop)` (a cell's price depends on
        its use alone, so a block priced later holds what pricing all at once would)."""
        if stop > self._priced_until:
            start, until = self._priced_until, self._block_until(self._priced_until, stop)
            # The floor and the ratio per server, not the two vectors: broadcast over
            # the slots alone, NumPy walks each slot's servers × resources as one run;
            # broadcast over the resources too, it walked runs of three through its
            # buffered iterator's copies. The same powers and products.
            self._prices[start:until] = price(
                self.used[start:until],
                self.capacity,
                self._floor_rows[: self.size],
                self.ceiling,
                self._ratio_rows[: self.size],
            )
            self._priced_until = until
        return self._prices

    def _block_until(self, start: int, stop: int) -> int:
        """Where a block of slots worked out from `start` ends, to cover `[start, stop)`:
        at least 8 slots, then doubling, within the horizon."""
        return min(self.horizon, max(stop, 2 * start, 8))

    @property
    def horizon(self) -> int:
        return self.params.horizon_slots

    @property
    def size(self) -> int:
        return len(self.node_ids)

    def figures(self, model: JobModel) -> _Figures:
        """What a search reads of the job's shape in this market, worked out once per
        shape (:func:`_shape_key`): one lookup per search instead of one per figure."""
        key = _shape_key(model)
        found = self._figures.get(key)
        if found is None:
            work = (self.params.slot_s * model.speed).tolist()
            ladder = self.ladder(model)
            found = _Figures(
                work=work,
                slowest=min([w for w in work if w > 0], default=0.0),
                rate=_least_rate(self, model, work),
                ladder=ladder,
                costs_at_once=None
                if ladder is None
                else partial(_ranked_costs, counts=ladder.counts, width=ladder.width),
            )
            self._figures[key] = found
        return found

    def slot_end(self, t: int) -> float:
        """End of horizon slot `t` on the caller's clock."""
        return (self.first_slot + t + 1) * self.params.slot_s

    def span(self, first: int, until: int) -> slice:
        """Horizon slots of absolute slots `[first, until)`."""
        start = min(max(first - self.first_slot, 0), self.horizon)
        return slice(start, min(max(until - self.first_slot, 0), self.horizon))

    # -- committed use --------------------------------------------------------------------------
    def load(self, snapshot: Snapshot, state: OasisState) -> None:
        """Use committed by OASiS's plans and by running jobs; the snapshot wins for now."""
        use = _Use(self.index, self.horizon)
        no_workers = (0.0, 0.0, 0.0)
        plans, running_state = state.jobs, JobState.RUNNING
        for job in snapshot.jobs:
            plan = plans.get(job.id)
            running = job.state is running_state
            if plan is None and not running:
                continue  # uses nothing yet (most waiting jobs of a busy round)
            dw = (float(job.gpus_per_worker), job.cpus_per_worker, job.memory_gb_per_worker)
            dps = (0.0, job.ps_cpus, job.ps_memory_gb) if job.ps else no_workers
            gpw = job.gpus_per_worker
            if running:
                # What runs is the truth for the current slot, whatever was planned.
                use.placed(0, 1, job.placement, gpw, dw)
            if plan is not None:
                for segment in plan.segments:
                    span = self.span(segment.first, segment.until)
                    if span.stop <= span.start:
                        continue
                    if running and span.start == 0:
                        use.nodes(0, 1, segment.nodes, no_workers, dps)
                        span = slice(1, span.stop)
                    use.nodes(span.start, span.stop, segment.nodes, dw, dps)
            if running and (plan is None or plan.next_start(self.first_slot + 1) is None):
                # Not (or no longer) planned: assume it keeps its GPUs while it has work.
                left = job.remaining_time_s(job.placed_workers)
                if left is None:
                    left = remaining_at_request_s(job, self.params)
                ends = math.ceil((self.now + left) / self.params.slot_s - _EPS) - self.first_slot
                use.placed(1, ends, job.placement, gpw, dw)
        use.add_to(self._cells)
        self._free_until = 0  # the use changed: every free amount is to be worked out

    def freed(self, stop: int) -> FloatArray:
        """`free` = max(capacity − used, 0), computed at least for slots `[0, stop)`, a
        growing block at a time as `priced` does (a cell's free amount depends on its use
        alone; a commit writes those of its cells itself). In place: the whole array is a
        few megabytes a decision (slots × servers × resources), most of it in slots no
        search reaches."""
        if stop > self._free_until:
            start, until = self._free_until, self._block_until(self._free_until, stop)
            block = self.free[start:until]
            np.subtract(self.capacity[None], self.used[start:until], out=block)
            np.maximum(block, 0.0, out=block)
            self._free_until = until
        return self.free

    def commit(self, model: JobModel, schedule: Schedule) -> None:
        """Add an admitted schedule's use and raise the prices it touches."""
        slots, servers = schedule.cells[0], schedule.cells[1]
        if not len(slots):
            return
        self._commits += 1
        # The schedule's slots were searched, so priced already; `priced` makes sure
        # (pricing a slot first and its changed cells again after gives what pricing
        # after would).
        self.priced(schedule.completion + 1)
        # One cell per (slot, server) of a schedule: each gets its use added once. The
        # cells' new shares of capacity and free amounts are compiled, their prices
        # :func:`price`'s; then the arrays and the ranked columns kept for their slots
        # learn them.
        self._cells.commit(
            schedule.held, slots, servers, self._shares_priced, self._commits, self._columns
        )

    def _repeated(self, rows: int) -> tuple[FloatArray, FloatArray]:
        """The floor and the ratio, each repeated as `rows` rows."""
        return np.tile(self.floor, (rows, 1)), np.tile(self.ratio, (rows, 1))

    def _shares_priced(self, shares: FloatArray) -> None:
        """Shares of capacity made prices, in place: the operations of :func:`price`.

        On rows of the floor and the ratio as long as `shares`, not on the two vectors
        broadcast: a commit prices a few dozen cells, and NumPy's broadcast of an
        operand over an array written in place goes through its buffered iterator,
        which cost more than the powers. Each element is the same power and product.
        """
        cells = len(shares)
        if cells > len(self._ratio_rows):
            self._floor_rows, self._ratio_rows = self._repeated(
                max(cells, 2 * len(self._ratio_rows))
            )
        np.multiply(
            self._floor_rows[:cells],
            np.power(self._ratio_rows[:cells], shares, out=shares),
            out=shares,
        )

    # -- the greedy layout of one slot ---------------------------------------------------------
    def slot_costs(self, model: JobModel, start: int, stop: int) -> SlotCosts:
        """Cheapest layout of each of the job's worker counts in slots `[start, stop)`.

        The same as :meth:`layouts` on those slots, but a job of the same shape (worker
        and parameter-server demands, worker counts, GPU memory) asked for the same block
        earlier in this decision reuses that table, recomputing only the slots a commit
        has touched since: each slot's layouts depend on that slot alone.
        """
        key = (*_shape_key(model), start, stop)
        touched = self._touched[start:stop].copy()
        cached = self._tables.get(key)
        if cached is None:
            table = self.layouts(model, slice(start, stop))
        else:
            seen, table = cached
            stale = np.flatnonzero(seen != touched)
            if len(stale) == len(touched):
                table = self.layouts(model, slice(start, stop))
            elif len(stale):
                fresh = self.layouts(model, stale + start)
                table = SlotCosts(
                    cost=table.cost.copy(),
                    nodes=table.nodes.copy(),
                    frame=table.frame.rows(stale, fresh.frame),
                    laid=_merged(table.laid, fresh.laid, stale),
                )
                table.cost[stale] = fresh.cost
                table.nodes[stale] = fresh.nodes
        self._tables[key] = (touched, table)
        return table

    def layouts(self, model: JobModel, slots: IntArray | slice) -> SlotCosts:
        """Cheapest layout of each of the job's worker counts in each of `slots`.

        Workers go, one server at a time, to the server where a worker costs least at
        the current prices, as many as fit there; the parameter servers then go the same
        way on what the workers left. Prices stay those at the job's arrival, as in the
        paper's subroutine. Two passes rather than worker+server bundles: a server may
        then sit where CPUs are cheap (a GPU-less node), and the worker:server ratio
        still holds by count. Only the cheapest few servers per slot can matter (y
        workers touch at most y servers), so the search keeps those candidates and works
        on small arrays for all the slots of the block at once.
        """
        counts, ps = model.counts, model.ps
        most_workers, most_ps = int(counts[-1]), int(ps.max())
        dps = model.ps_demand
        locate_ps = most_ps > 0 and bool((dps > 0).any())
        prices = self.priced(_stop(slots))[slots]
        free = self.freed(_stop(slots))[slots]
        rows = np.arange(prices.shape[0])[:, None]
        masked, fit = self._worker_costs(model, prices, free, most_workers)
        candidates = _cheapest(masked, most_workers)
        if locate_ps:
            ps_cost = worker_costs(prices, dps)  # a server's cost, as a worker's
            ps_fit = _fitting(free, dps, most_ps)
            # Workers may take CPUs or memory of a cheap PS host: keep spares.
            ps_candidates = _cheapest(np.where(ps_fit > 0, ps_cost, np.inf), most_ps + most_workers)
            candidates = np.concatenate([candidates, ps_candidates], axis=1)
            candidates = np.sort(candidates, axis=1)
            duplicate = np.zeros(candidates.shape, dtype=bool)
            duplicate[:, 1:] = candidates[:, 1:] == candidates[:, :-1]
            cand_fit = np.where(duplicate, 0, fit[rows, candidates])
        else:
            # Workers only: the candidates are distinct servers, none is a duplicate.
            if candidates.shape[1] > 1:
                candidates = np.sort(candidates, axis=1)
            cand_fit = fit[rows, candidates]
        cand_cost = masked[rows, candidates]  # the worker cost wherever one fits
        if candidates.shape[1] > 1:
            order = np.argsort(np.where(cand_fit > 0, cand_cost, np.inf), axis=1, kind="stable")
            nodes = candidates[rows, order]
            cand_fit = cand_fit[rows, order]
            cand_cost = cand_cost[rows, order]
            if locate_ps:
                duplicate = duplicate[rows, order]
        else:
            nodes = candidates
        frame = Frame(
            fit=cand_fit,
            before=np.cumsum(cand_fit, axis=1) - cand_fit,  # workers fitting on cheaper servers
            unit=np.where(cand_fit > 0, cand_cost, 0.0),
            free_at=free[rows, nodes] if locate_ps else None,
            duplicate=duplicate if locate_ps else None,
            ps_unit=ps_cost[rows, nodes] if locate_ps else None,
        )
        room_ps: IntArray | None = None
        if locate_ps:
            # Servers that fit on the candidates before any worker takes its share.
            room_ps = frame.servers_room(model, most_ps)[0][:, :, 0].sum(axis=1)
        # Counts above what the candidates hold in every slot of the block cost inf
        # there and are not laid out (the `live` counts, ascending, are a prefix); the
        # others are laid out a chunk at a time and only their costs kept.
        blocks, width = cand_fit.shape
        live = int(np.searchsorted(counts, int(cand_fit.sum(axis=1).max()), side="right"))
        if room_ps is not None:
            # Likewise the counts whose servers exceed that in every slot (servers grow
            # with the count, and workers only take room from them).
            live = min(live, int(np.searchsorted(ps, int(room_ps.max()), side="right")))
        cost = np.full((blocks, len(counts)), np.inf)
        chunk = max(1, _LAID_AT_ONCE // max(1, blocks * width))
        laid: tuple[IntArray, IntArray | None] | None = None
        for first in range(0, live, chunk):
            part = slice(first, min(live, first + chunk))
            costed, fits, workers, servers = _lay(frame, counts[part], ps[part], model, most_ps)
            cost[:, part] = np.where(fits, costed, np.inf)
            if live <= chunk:
                laid = workers, servers
        return SlotCosts(cost=cost, nodes=nodes, frame=frame, laid=laid)

    def _worker_costs(
        self, model: JobModel, prices: FloatArray, free: FloatArray, most_workers: int
    ) -> tuple[FloatArray, IntArray]:
        """(slots, servers): one worker's cost on each server, inf where none fits; and
        how many workers fit on each (at most `most_workers`)."""
        dw = model.worker_demand
        worker_cost = worker_costs(prices, dw)  # (B, S)
        fit = _fitting(free, dw, most_workers)
        too_small = self._too_small_for(model.job.gpu_memory_gb)
        if too_small is not None:
            fit[:, too_small] = 0
        masked: FloatArray = np.where(fit > 0, worker_cost, np.inf)
        return masked, fit

    def _too_small_for(self, gpu_memory_gb: float) -> npt.NDArray[np.bool_] | None:
        """Servers whose GPUs have too little memory for the job (None: none)."""
        if gpu_memory_gb not in self._too_small:
            mask = self.gpu_memory < gpu_memory_gb
            self._too_small[gpu_memory_gb] = mask if mask.any() else None
        return self._too_small[gpu_memory_gb]

    # -- the ranked form -------------------------------------------------------------------------
    def ladder(self, model: JobModel) -> _Ladder | None:
        """How :meth:`ranked` lays out the job's workers, or None where only
        :meth:`layouts` can.

        The ranked form covers a job with no parameter servers to place whose worker
        needs some resource (most jobs): its workers then fill the servers in order of
        one worker's cost (ties by index), which a ranking of each slot's servers by
        that cost, kept in step with commits, gives without costing every server.
        Searches read it once per shape, through :meth:`figures`.
        """
        ladder: _Ladder | None = None
        # Plain floats and ints: a few numbers, which NumPy takes longer to start on.
        demand = tuple(model.worker_demand.tolist())
        locate_ps = max(model.ps.tolist()) > 0 and any(d > 0 for d in model.ps_demand.tolist())
        counts = model.counts.tolist()
        most = counts[-1]
        if any(d > 0 for d in demand) and not locate_ps and most >= 1:
            ladder = _Ladder(
                demand=demand,
                most=most,
                width=min(most, self.size),
                counts=counts,
                small=self._small_flags_for(model.job.gpu_memory_gb),
            )
        return ladder

    def ranked(self, ladder: _Ladder, t: int) -> list[tuple[int, int, float]]:
        """The servers :meth:`layouts` fills in slot `t` for the ladder's job, in the
        order it fills them: (server, workers that fit there, cost of one worker),
        until they hold its most workers (or every server that fits one is listed)."""
        column = self.column(t)
        rank = column.ranks.get(ladder.demand)
        if rank is None:
            rank = column.ranks[ladder.demand] = SlotRank(ladder.demand, column)
        return rank.walk(column, ladder.most, ladder.small)

    @cached_property
    def names(self) -> ServerNames:
        """The servers' node ids, and their order by id, for the compiled layouts."""
        return ServerNames(self.node_ids)

    @property
    def columns(self) -> dict[int, Column]:
        """The columns made so far, by slot, for the compiled search to read."""
        return self._columns

    def column(self, t: int) -> Column:
        """Every resource of every server in slot t, as plain floats kept in step by
        `commit`."""
        column = self._columns.get(t)
        if column is None:
            prices = self.priced(t + 1)
            column = self._columns[t] = Column(prices[t], self.freed(t + 1)[t])
        return column

    def _small_flags_for(self, gpu_memory_gb: float) -> bytes | None:
        """:meth:`_too_small_for` as one byte per server (1: too small), for the walks."""
        if gpu_memory_gb not in self._small_flags:
            mask = self._too_small_for(gpu_memory_gb)
            flags = None if mask is None else mask.astype(np.uint8).tobytes()
            self._small_flags[gpu_memory_gb] = flags
        return self._small_flags[gpu_memory_gb]

    def binding_resource(self, model: JobModel) -> str:
        """The resource that leaves room for the fewest of the job's workers over the horizon."""
        free = np.maximum(self.capacity[None] - self.used, 0.0)
        usable = self.gpu_memory >= model.job.gpu_memory_gb
        room = []
        for k in range(_K):
            demand = model.worker_demand[k]
            if demand <= 0:
                room.append(np.inf)
                continue
            room.append(float(np.floor(free[:, usable, k] / demand + _EPS).sum()))
        return RESOURCES[int(np.argmin(room))]


@dataclass(frozen=True)
class _Ladder:
    """What the ranked form needs of a job shape (:meth:`Market.ladder`)."""

    demand: tuple[float, ...]  # what a worker needs of each resource
    most: int  # most workers
    width: int  # candidate servers the general form keeps: min(most, servers)
    counts: list[int]
    small: bytes | None  # servers whose GPUs have too little memory (1 per such server)


def _shape_key(model: JobModel) -> tuple[object, ...]:
    """What a market keeps a job shape's figures and tables by: the fields its arrays
    come from (or, for a model made without them, the arrays themselves) and its GPU
    memory, which decides the servers it may use."""
    arrays: tuple[object, ...] = model.shape or (
        model.counts.tobytes(),
        model.ps.tobytes(),
        model.worker_demand.tobytes(),
        model.ps_demand.tobytes(),
    )
    return (arrays, model.job.gpu_memory_gb)


@dataclass(frozen=True, slots=True)
class _Figures:
    """What a search reads of a job shape in one market (:meth:`Market.figures`)."""

    work: list[float]  # a whole slot's work at each count (seconds at the job's request)
    slowest: float  # the least positive of `work` (0.0: no count makes progress)
    rate: float  # the floor price of a second of work (:func:`_least_rate`)
    ladder: _Ladder | None  # the ranked form's figures (None: the table form)
    # Not the market's `ranked` for the ladder: the market holds these figures, and
    # they would hold it back (a cycle left for the collector after every decision).
    costs_at_once: Callable[[Sequence[tuple[int, int, float]]], list[float]] | None


def _ranked_costs(
    candidates: Sequence[tuple[int, int, float]], counts: Sequence[int], width: int
) -> list[float]:
    """Full-slot cost of each count laid out on `candidates` (:meth:`Market.ranked`),
    inf where they cannot hold it: the workers fill the candidates in order, and each
    count's cost is summed as :meth:`Market.layouts` sums its `width` terms."""
    if len(counts) == 1 and counts[0] == 1:
        # One worker (most jobs): 0 + 1 · cost, that is the first candidate's cost.
        return [candidates[0][2] if candidates else math.inf]
    if len(counts) * width > _LOOPED_CELLS:
        room = sum(fit for _, fit, _ in candidates)
        return _ranked_costs_at_once(candidates, counts, width, room)
    costs: list[float] = ranked_costs(candidates, counts, width)
    return costs


_LOOPED_CELLS = 256
"""Above this many (count, candidate) cells, :func:`_ranked_costs` sums every count at
once with NumPy instead of one count at a time (:func:`ranked_costs`, compiled). The
jobs of the examples and traces (a few counts) stay below it; either form gives the
same sums."""

_NO_UNITS: IntArray = np.zeros(0, dtype=np.int64)
"""The units as arrays, where the search of a job of one count on the ranked form reads
none (its compiled loop takes the two numbers)."""


def _ranked_costs_at_once(
    candidates: Sequence[tuple[int, int, float]], counts: Sequence[int], width: int, room: int
) -> list[float]:
    """:func:`_ranked_costs` for many counts: the product and the row sums that
    :meth:`Market.layouts` computes, on this slot's walk padded with zeros to `width`
    candidates. A count fills the candidates in order, so on each it puts
    min(max(count − workers on the ones before, 0), its fit); NumPy then sums each
    count's row as it sums the table's (the same `width` values in the same places)."""
    wanted = np.asarray(counts, dtype=np.int64)
    out = np.full(len(wanted), math.inf)
    fitting = wanted <= room
    if candidates and fitting.any():
        fit = np.zeros(width, dtype=np.int64)
        cost = np.zeros(width)
        fit[: len(candidates)] = [f for _, f, _ in candidates]
        cost[: len(candidates)] = [c for _, _, c in candidates]
        before = np.cumsum(fit) - fit
        rows = np.flatnonzero(fitting)
        chunk = max(1, _LAID_AT_ONCE // width)  # a few megabytes at a time, as `_lay`
        for first in range(0, len(rows), chunk):
            part = rows[first : first + chunk]
            workers = np.minimum(np.maximum(wanted[part, None] - before[None, :], 0), fit[None, :])
            out[part] = (workers * cost[None, :]).sum(axis=1)
    return list(out.tolist())


def _stop(slots: IntArray | slice) -> int:
    """One past the last of `slots` (a slice with a stop, or indices)."""
    if isinstance(slots, slice):
        assert slots.stop is not None
        return int(slots.stop)
    return int(slots.max()) + 1 if len(slots) else 0


class _Use:
    """Use to add to the market, gathered as rows (slots `[start, stop)` of one server:
    workers and parameter servers of given demands) and added at once.

    The rows are added in the order they came, cell after cell (compiled,
    :meth:`MarketCells.add_rows`), so every cell receives the same additions in the
    same order as adding each row to a slice of the array would (the same sums, to the
    last bit), without a numpy call per row.
    """

    def __init__(self, index: Mapping[str, int], horizon: int) -> None:
        self.index = index
        self.horizon = horizon
        # Flat, five numbers a row (start, stop, server, workers, servers) and six
        # demands (a worker's, then a server's): NumPy makes an array of a flat list in
        # half the time it takes over a list of tuples.
        self.rows: list[int] = []
        self.demands: list[float] = []

    def placed(
        self,
        start: int,
        stop: int,
        placement: Iterable[Assignment],
        gpus_per_worker: int,
        dw: tuple[float, float, float],
    ) -> None:
        """A running job's workers where it runs (no servers: nothing says where)."""
        stop = min(stop, self.horizon)
        if start >= stop:
            return
        for a in placement:
            h = self.index.get(a.node_id)
            if h is not None:
                self.rows.extend((start, stop, h, len(a.gpu_indices) // gpus_per_worker, 0))
                self.demands.extend(dw)
                self.demands.extend(_NO_DEMAND)

    def nodes(
        self,
        start: int,
        stop: int,
        nodes: Iterable[tuple[str, int, int]],
        dw: tuple[float, float, float],
        dps: tuple[float, float, float],
    ) -> None:
        """A plan's workers and servers on each of its nodes."""
        if start >= stop:
            return
        for node_id, workers, servers in nodes:
            h = self.index.get(node_id)
            if h is not None:
                self.rows.extend((start, stop, h, workers, servers))
                self.demands.extend(dw)
                self.demands.extend(dps)

    def add_to(self, cells: MarketCells) -> None:
        if not self.rows:
            return
        rows = np.array(self.rows, dtype=np.int64).reshape(-1, 5)
        demands = np.array(self.demands, dtype=np.float64).reshape(-1, 2 * _K)
        workers, servers = rows[:, 3], rows[:, 4]
        # Per row: workers · worker demand + servers · server demand, as per slice.
        held = workers[:, None] * demands[:, :_K] + servers[:, None] * demands[:, _K:]
        cells.add_rows(rows, held)


_NO_DEMAND = (0.0, 0.0, 0.0)
"""A row's server demand where it places no servers."""


def _cheapest(cost: FloatArray, count: int) -> IntArray:
    """Indices of the `count` cheapest servers of each row (all of them when fewer), in
    index order; among servers of equal cost, the lowest indices.

    The tie-break is defined here rather than left to `np.argpartition`, whose choice
    among equal values depends on the machine (NumPy selects with SIMD code where the
    processor has it): the same snapshot must get the same plan on every machine. The
    `count`-th smallest value itself is the same everywhere, so it is taken from
    `np.partition` and the ties at it are filled in index order.
    """
    rows, servers = cost.shape
    if count >= servers:
        return np.broadcast_to(np.arange(servers), cost.shape).copy()
    if count == 1:
        least: IntArray = cost.argmin(axis=1)[:, None]  # the first of equal minima
        return least
    kth = np.partition(cost, count - 1, axis=1)[:, count - 1 : count]
    below = cost < kth
    tied = cost == kth
    wanted = count - below.sum(axis=1, keepdims=True)
    chosen = below | (tied & (np.cumsum(tied, axis=1) <= wanted))
    picked: IntArray = np.nonzero(chosen)[1].reshape(rows, count)
    return picked


# -- the schedule subroutine --------------------------------------------------------------------


class SlotRun(msgspec.Struct, frozen=True, kw_only=True):
    t: int  # horizon slot
    workers: int
    ps: int
    layout: tuple[tuple[int, int, int], ...]  # (server index, workers, parameter servers)


class Schedule(msgspec.Struct, frozen=True, kw_only=True):
    segments: tuple[Segment, ...]
    """The slots it runs, in absolute slots and node ids, runs of identical slots merged:
    the segments of its plan (:func:`plan_of`)."""
    completion: int  # horizon slot of the last run
    completion_s: float
    """When the work is done: the end of slot `completion`, or inside it when the
    schedule is valued within its last slot (`OasisParams.completion_value`)."""
    utility: float
    cost: float
    cost_by_resource: FloatArray
    cells: tuple[IntArray, IntArray, IntArray, IntArray]
    """The layouts of its slots flattened, in slot order: (horizon slot, server, workers,
    servers) per server used. Pricing and committing read these arrays."""
    held: FloatArray
    """What each cell holds of each resource (cells × resources)."""

    @property
    def payoff(self) -> float:
        return self.utility - self.cost


class Search(msgspec.Struct, frozen=True):
    """The best schedule found (positive payoff or not), or why there is none."""

    best: Schedule | None
    reason: str = ""


Finish = tuple[int, int, int, float]
"""A way to finish a job in one slot: the count index run in it, the units done before
it, the units the slot does at that count, and the least cost of the whole schedule.
The ways to finish in a slot are listed by count, then state: for each count that can
run and does some work, each state short of done that one slot's work of it completes,
at a finite cost."""


class _Programme:
    """The dynamic programme over slots, for one job (the paper's schedule subroutine).

    `done[d]` is the least cost of having done d units of work (d = Q: all of it)
    by the end of the slots seen so far. A slot offers option 0, running nothing
    (allowed before the start, d = 0, and after the end, d = Q, only: a started job
    runs in every slot until done), or option i + 1, running counts[i] workers for
    units[i] units at cost[i]. Each slot's step is compiled (:func:`programme_step`);
    the history it keeps (the states before each slot, the option chosen for each
    state after it) is what the ways to finish and the backtrack read.
    """

    def __init__(self, total: int) -> None:
        self.total = total
        self.done = np.full(total + 1, np.inf)
        self.done[0] = 0.0
        self.history: list[tuple[FloatArray, npt.NDArray[np.intp], IntArray]] = []
        self.costs: list[FloatArray] = []  # per slot, the cost of each count (inf: cannot run)

    def step(self, units: IntArray, cost: FloatArray) -> float:
        """Advance one slot whose count i does units[i] at cost[i] (inf: it cannot run);
        return the least cost of being done by its end (:func:`programme_step`,
        compiled)."""
        self.costs.append(cost)
        done, choice = programme_step(self.done, units, cost)
        self.history.append((self.done, choice, units))
        self.done = done
        return float(done[self.total])

    def walked_best(
        self, end: float, length: float, submit: float, utility: UtilityCurve, best: float
    ) -> tuple[float, float, int, int] | None:
        """The way to finish in the slot last stepped (a slot of `length` ending at
        `end`) that walking its ways (:data:`Finish`) in order keeps, each way that pays
        strictly more than `best` replacing it: (payoff, when done, count index, units done
        before), or None (:func:`programme_best_finish`, compiled)."""
        before, _, units = self.history[-1]
        return programme_best_finish(
            before, units, self.costs[-1], self.total, end, length, submit, utility, best
        )

    def best_way(
        self, at_start: float, best: float, payoff: _WayPayoff
    ) -> tuple[float, float, Finish] | None:
        """The way to finish in the slot last stepped that the search keeps, with its
        (payoff, completion time): of its ways (:data:`Finish`) that pay strictly
        more than `best`, the one of highest payoff, the first in that list among equals,
        which is what walking the list and keeping each strictly better way gives.
        `payoff(before, run, cost)` is the search's own (payoff, completion time) of a way.
        None when no way pays more than `best`.

        Counts whose cheapest way could not beat `best` even at `at_start` (the utility
        never grows within the slot) are dropped first, then such ways. The others are
        taken in order of an upper bound of their payoff (:meth:`_WayPayoff.most`), and
        the utility is evaluated only until that bound is below the best payoff found:
        nothing further can be kept. A job that accepts thousands of counts has hundreds
        of thousands of ways; walking them one by one was most of its search.
        """
        before, _, units = self.history[-1]
        cost, top = self.costs[-1], self.total
        live = np.flatnonzero(np.isfinite(cost) & (units > 0))
        if not len(live):
            return None
        suffix = np.minimum.accumulate(before[:top][::-1])[::-1]
        lowest = np.maximum(0, top - units[live])
        keep = at_start - (suffix[lowest] + cost[live]) > best
        live, lowest = live[keep], lowest[keep]
        if not len(live):
            return None
        # Every (count, state) way of the counts left, as one matrix in the list's order
        # (by count, then state): the same sums as the ways of :data:`Finish`, and the most each way
        # could pay.
        paid = before[None, :top] + cost[live, None]
        flat_paid = paid.ravel()
        ways = np.flatnonzero(
            (np.arange(top)[None, :] >= lowest[:, None])
            & np.isfinite(paid)
            & (at_start - paid > best)
        )
        # Then the tighter bound of each way left, from its completion time.
        rows, states = np.divmod(ways, top)
        bounds = payoff.most(states, units[live[rows]], flat_paid[ways])
        order = np.argsort(-bounds, kind="stable")
        kept: tuple[float, float, Finish] | None = None
        highest = best
        for o in order.tolist():
            bound, k = float(bounds[o]), int(ways[o])
            # A way whose most is below the kept payoff cannot be kept; one whose most
            # equals it can, only by tying a way of this slot that comes later in the list.
            if bound < highest or (kept is None and bound <= highest):
                break
            row, state = divmod(k, top)
            i, run = int(live[row]), int(units[live[row]])
            way_cost = float(flat_paid[k])
            value, done_at = payoff(state, run, way_cost)
            way = (i, state, run, way_cost)
            if value > highest or (kept is not None and value == highest and way[:2] < kept[2][:2]):
                highest, kept = value, (value, done_at, way)
        return kept

    def backtrack(self, last: int, entry: tuple[int, int] | None = None) -> dict[int, int]:
        """Count index run in each slot of the cheapest way to be done by slot `last`, or,
        given `entry` (count index, units done before), of the cheapest way to finish in
        slot `last` from that state with that count."""
        runs: dict[int, int] = {}
        total = done = self.total
        if entry is not None:
            runs[last], done = entry
            last -= 1
        for t in range(last, -1, -1):
            before, choice, units = self.history[t]
            option = int(choice[done])
            if option == 0:
                continue
            count = option - 1
            runs[t] = count
            if done == total:
                lowest = max(0, total - int(units[count]))
                done = lowest + int(np.argmin(before[lowest : total + 1]))
            else:
                done -= int(units[count])
        return runs


_WALKED_COUNTS = 32
"""Up to this many counts, the search walks every way to finish in a slot in order;
beyond, :meth:`_Programme.best_way` evaluates the few that can matter."""


def _blocks(horizon: int) -> list[tuple[int, int]]:
    """Slot ranges whose layouts are computed together: 8, 16, 32, … slots.

    Short jobs, the common case, stop after the first block or two; long ones
    amortise the per-block work over many slots.
    """
    out, start, size = [], 0, 8
    while start < horizon:
        out.append((start, min(horizon, start + size)))
        start, size = start + size, size * 2
    return out


def _least_rate(market: Market, model: JobModel, work: Sequence[float]) -> float:
    """The floor price of a second of the job's work at its most frugal count (`work`:
    a whole slot's work at each count).

    A lower bound of any schedule's cost is the job's work at this rate: prices never
    fall below L, so each unit of work costs at least the floor price of what the most
    frugal worker count holds per unit of progress.

    On plain floats: a job has a handful of counts, and NumPy's start-up per call costs
    more than the arithmetic. Each number is formed by the same operations in the same
    order as on arrays, so it is the same: a count's use of each resource is
    count · worker demand + servers · server demand; its floor cost adds those uses at
    the floor prices in resource order (not a matrix product: see worker_costs)."""
    floor = market.floor.tolist()
    needed = [k for k in range(_K) if floor[k] > 0]
    worker, server = model.worker_demand.tolist(), model.ps_demand.tolist()
    least = math.inf
    counts, servers = model.counts.tolist(), model.ps.tolist()
    for count, ps, done in zip(counts, servers, work, strict=True):
        if done <= 0:
            continue  # no progress at this count: no price per second of work
        held = 0.0
        for i, k in enumerate(needed):
            term = (count * worker[k] + ps * server[k]) * floor[k]
            held = term if i == 0 else held + term
        # Floor price per slot over the work a slot does: the price of a second of work.
        least = min(least, held / max(done, _EPS))
    return least


def search_schedule(market: Market, model: JobModel) -> Search:
    """The job's schedule of best payoff over the horizon at the market's prices (§IV)."""
    params = market.params
    counts = model.counts
    # Plain floats and ints: a job has a handful of counts, and NumPy's overhead on
    # arrays that small is most of the cost. The operations are NumPy's, one by one
    # (each rounds the same), so the units are the same.
    figures = market.figures(model)
    full_work, slowest = figures.work, figures.slowest  # a whole slot's work at each count
    if slowest <= 0:
        return Search(None, "it makes no progress at any worker count it accepts")
    # Units: a slot at the slowest count is 16 units, unless the job would need more
    # than `work_units` of them; each slot's work is rounded down, never up. A job
    # shorter than that slot is 16 units itself, so that the part of the current slot
    # left can finish it: at a slot's resolution a job of a minute would be one unit,
    # which a slot with less than a sixteenth left cannot start, and so would wait for
    # the next slot in an idle cluster.
    unit = max(min(slowest, model.remaining_s) / 16.0, model.remaining_s / params.work_units)
    total = max(1, math.ceil(model.remaining_s / unit - _EPS))
    fraction = market.first_fraction
    single = len(counts) == 1
    if single:
        # One count (most jobs): the two lists below without a comprehension each.
        work = full_work[0]
        full_list = [math.floor(work / unit + _EPS)]
        first_list = [math.floor(fraction * work / unit + _EPS)]
    else:
        full_list = [math.floor(w / unit + _EPS) for w in full_work]
        first_list = [math.floor(fraction * w / unit + _EPS) for w in full_work]
    submit = model.job.submit_time
    # No schedule costs less than the work at the floor prices (the stop rule's bound).
    floor_cost = model.remaining_s * figures.rate

    programme = _Programme(total) if not single else None
    one = OneCount(total) if single else None
    ladder = figures.ladder
    tables: list[tuple[int, SlotCosts]] = []
    walks: dict[int, list[tuple[int, int, float]]] = {}
    rows: Iterator[tuple[int, list[float] | FloatArray]]
    if ladder is not None and single:
        # One count on the ranked form (most jobs): the compiled loop walks the slots
        # itself and reads the two numbers of units alone.
        full_units = first_units = _NO_UNITS
        rows = iter(())
    else:
        full_units = np.array(full_list, dtype=np.int64)
        first_units = np.array(first_list, dtype=np.int64)
        if ladder is not None:
            rows = _ranked_rows(market, ladder, first_list, full_list, walks)
        else:
            rows = _table_rows(market, model, first_units, full_units, tables)
    best_payoff, best_t, best_end = -math.inf, -1, 0.0
    entry: tuple[int, int] | None = None  # how the best finishes in its last slot
    stopped_by_value = False
    value_at, first_slot, slot_s = model.utility.value_at, market.first_slot, params.slot_s
    within = params.completion_value == "within_slot"
    finishes = one or programme
    assert finishes is not None
    curve = _curve(model.utility)  # the same utility, for the compiled parts
    # What the compiled loops read of the slots, the job and the market.
    search = SlotSearch(
        ladder,
        market.columns,
        None if ladder is None else partial(market.ranked, ladder),
        figures.costs_at_once,
        market.horizon,
        _LOOPED_CELLS,
        fraction,
        first_slot,
        slot_s,
        submit,
        floor_cost,
        curve,
        within,
        walks,
    )
    if one is not None:
        # One count (most jobs): the loop of several counts below, step for step, for
        # one count and compiled (policies/common/_oasis.pyx). On the ranked form it
        # walks the slots itself; on the table form it reads `rows`.
        best_payoff, best_t, best_end, entry, stopped_by_value = search_one_count(
            one, search, rows, first_list[0], full_list[0]
        )
    elif ladder is not None and len(counts) <= _WALKED_COUNTS:
        # A few counts on the ranked form: the loop below for that case, step for step,
        # compiled.
        assert programme is not None
        best_payoff, best_t, best_end, entry, stopped_by_value = search_counts(
            programme, search, first_units, full_units
        )
    else:
        assert programme is not None
        way_payoff = _WayPayoff(value_at, submit, 0.0, 0.0, total)  # its slot set as reached
        for t, row in rows:
            units = first_units if t == 0 else full_units
            finished = programme.step(units, np.asarray(row, dtype=np.float64))
            end = (first_slot + t + 1) * slot_s
            value = value_at(end - submit)  # at the end of slot t
            if within and math.isfinite(finished):
                # The slot's start bounds the value of a finish inside it; only a schedule
                # that could beat the best so far is followed to where it finishes.
                length = slot_s * (fraction if t == 0 else 1.0)
                at_start = value_at(end - length - submit)
                if at_start - finished > best_payoff:
                    way_payoff.end, way_payoff.length = end, length
                    if len(counts) > _WALKED_COUNTS:
                        # Many counts: evaluate few of their many ways.
                        kept = programme.best_way(at_start, best_payoff, way_payoff)
                        if kept is not None:
                            best_payoff, best_end, (index, before, _, _) = kept
                            best_t, entry = t, (index, before)
                    else:
                        # The few ways of a job of a few counts, walked in order (compiled).
                        walked = programme.walked_best(end, length, submit, curve, best_payoff)
                        if walked is not None:
                            best_payoff, best_end, index, before = walked
                            best_t, entry = t, (index, before)
            elif math.isfinite(finished) and value - finished > best_payoff:
                best_payoff, best_t, best_end = value - finished, t, end
            if value - floor_cost <= max(best_payoff, 0.0):
                # Utility never grows and no schedule costs less than the floor prices:
                # no later finish can pay more, nor pay at all.
                stopped_by_value = True
                break

    if best_t < 0:
        reason = _why_none(market, model, stopped_by_value, total, max(full_list))
        if stopped_by_value and floor_cost > 0:
            earliest = model.utility.value_at(market.slot_end(0) - submit)
            reason = (
                f"its utility ({earliest:.4g} at the earliest) cannot cover even the floor "
                f"price of its work ({floor_cost:.4g}) before it could finish"
            )
        return Search(None, reason)
    runs = finishes.backtrack(best_t, entry)
    ordered = sorted(runs.items())
    if ladder is not None:
        segments, cells, cost_by_resource, held = _ranked_runs(
            market, model, ladder, ordered, walks
        )
    else:
        slots, cells = _runs(model, ordered, tables)
        segments = _segments(market, slots)
        cost_by_resource, held = _priced(market, model, cells)
    completion = max(runs)
    assert completion == best_t
    return Search(
        Schedule(
            segments=tuple(segments),
            completion=completion,
            completion_s=best_end,
            utility=value_at(best_end - submit),
            # NumPy's sum of the three, without starting NumPy for it.
            cost=numpy_sum(cost_by_resource.tolist(), _K),
            cost_by_resource=cost_by_resource,
            cells=cells,
            held=held,
        )
    )


def _curve(utility: Utility) -> UtilityCurve:
    """The utility as the compiled search evaluates it (the same `value_at`)."""
    if isinstance(utility, SigmoidUtility):
        return UtilityCurve(True, utility.value, utility.midpoint_s, utility.steepness)
    return UtilityCurve(False, utility.value, deadline=utility.deadline_s)


@dataclass(slots=True)
class _WayPayoff:
    """The payoff of a way to finish in a slot of `length` that ends at `end`, and when
    it is done. Each way is done when the work it has left takes the slot's rate: more
    done before the slot costs more and finishes sooner in it. One per search, its slot
    moved along as the search reaches each."""

    value_at: Callable[[float], float]
    submit: float
    end: float
    length: float
    total: int

    def __call__(self, before: int, run: int, cost: float) -> tuple[float, float]:
        done_at = self.end - self.length * (1.0 - min(1.0, (self.total - before) / run))
        return self.value_at(done_at - self.submit) - cost, done_at

    def most(self, before: IntArray, run: IntArray, cost: FloatArray) -> FloatArray:
        """An upper bound of each way's payoff, without its utility: the utility at the
        last of `_GRID` points of the slot at or before the way is done, less its cost.

        The completion times are those of :meth:`__call__` (the same operations, on
        arrays), and the utility never grows, so no way pays more than its bound.
        """
        done_at = self.end - self.length * (1.0 - np.minimum(1.0, (self.total - before) / run))
        grid = (self.end - self.length) + self.length * (np.arange(_GRID) / _GRID)
        values = np.array([self.value_at(at - self.submit) for at in grid.tolist()])
        below = np.searchsorted(grid, done_at, side="right") - 1  # grid[0] is the slot's start
        bound: FloatArray = values[below] - cost
        return bound


_GRID = 32
"""Points of a slot at which :meth:`_WayPayoff.most` evaluates the utility."""


def _table_rows(
    market: Market,
    model: JobModel,
    first_units: IntArray,
    full_units: IntArray,
    tables: list[tuple[int, SlotCosts]],
) -> Iterator[tuple[int, list[float] | FloatArray]]:
    """Each slot's cost of each count from :meth:`Market.slot_costs`, a block at a time
    (`tables` collects the blocks): inf where that count does no whole unit of work; the
    current slot is paid pro rata."""
    single = len(model.counts) == 1
    for start, stop in _blocks(market.horizon):
        table = market.slot_costs(model, start, stop)
        tables.append((start, table))
        costs = np.where(full_units > 0, table.cost, np.inf)
        if start == 0:
            costs[0] = np.where(first_units > 0, table.cost[0] * market.first_fraction, np.inf)
        if single:
            # Plain floats for the one-count programme.
            for t, cost in enumerate(costs[:, 0].tolist(), start):
                yield t, [cost]
        else:
            for t in range(start, stop):
                yield t, costs[t - start]


def _ranked_rows(
    market: Market,
    ladder: _Ladder,
    first_units: list[int],
    full_units: list[int],
    walks: dict[int, list[tuple[int, int, float]]],
) -> Iterator[tuple[int, list[float] | FloatArray]]:
    """:func:`_table_rows` by the ranked form, one slot at a time (`walks` collects each
    slot's candidates): the same costs, computed only for the slots the search reaches."""
    whole = [u > 0 for u in full_units]
    first = [u > 0 for u in first_units]
    fraction = market.first_fraction
    for t in range(market.horizon):
        walk = walks[t] = market.ranked(ladder, t)
        costs = _ranked_costs(walk, ladder.counts, ladder.width)
        if t == 0:
            yield t, [c * fraction if ok else math.inf for c, ok in zip(costs, first, strict=True)]
        else:
            yield t, [c if ok else math.inf for c, ok in zip(costs, whole, strict=True)]


def _ranked_runs(
    market: Market,
    model: JobModel,
    ladder: _Ladder,
    ordered: Sequence[tuple[int, int]],
    walks: dict[int, list[tuple[int, int, float]]],
) -> tuple[list[Segment], tuple[IntArray, IntArray, IntArray, IntArray], FloatArray, FloatArray]:
    """:func:`_runs`, :func:`_segments` and :func:`_priced` for a schedule found by the
    ranked form: each slot's workers fill that slot's candidates in order, as in the
    table (compiled).

    Each resource costs the sum over cells of share · price · held, added one cell
    after another as NumPy reduces the rows of :func:`_priced` (held is workers ·
    demand; the parameter servers, none here, add exact zeros).
    """
    segments, cells, holds, by_resource = ranked_layouts(
        walks,
        ordered,
        ladder.counts,
        model.ps.tolist(),
        market.columns,
        market.first_fraction,
        ladder.demand,
        market.names,
        market.first_slot,
        Segment,
    )
    return segments, cells, by_resource, holds


def _laid(frame: Frame, option: int, model: JobModel) -> tuple[IntArray, IntArray]:
    """Workers and servers on each candidate of each slot of `frame` (B, M) for the count
    `option`: :func:`_lay` for that count alone, as the table was costed."""
    count = slice(option, option + 1)
    _, _, workers, servers = _lay(
        frame, model.counts[count], model.ps[count], model, int(model.ps.max())
    )
    placed = workers[:, 0]
    return placed, np.zeros_like(placed) if servers is None else servers[:, 0]


def _runs(
    model: JobModel, ordered: Sequence[tuple[int, int]], tables: Sequence[tuple[int, SlotCosts]]
) -> tuple[list[SlotRun], tuple[IntArray, IntArray, IntArray, IntArray]]:
    """The slots a job runs (slot, count index), laid out as their tables say, and
    their cells."""
    slots = []
    columns: list[tuple[IntArray, IntArray, IntArray, IntArray]] = []
    block = 0
    # A schedule runs one count over consecutive slots, mostly of one block: each
    # (block, count) is laid out once, for all the block's slots.
    derived: dict[tuple[int, int], tuple[IntArray, IntArray]] = {}
    for t, option in ordered:
        while block + 1 < len(tables) and tables[block + 1][0] <= t:
            block += 1
        first, table = tables[block]
        row = t - first
        if table.laid is not None and option < table.laid[0].shape[1]:
            on_slot, servers_on_slot = table.laid
            workers = on_slot[row, option]
            servers = (
                np.zeros_like(workers) if servers_on_slot is None else servers_on_slot[row, option]
            )
        else:
            if (block, option) not in derived:
                derived[block, option] = _laid(table.frame, option, model)
            on_block, servers_on_block = derived[block, option]
            workers, servers = on_block[row], servers_on_block[row]
        used = np.flatnonzero(workers + servers)
        on, held_w, held_s = table.nodes[row, used], workers[used], servers[used]
        columns.append((np.full(len(on), t, dtype=np.int64), on, held_w, held_s))
        layout = tuple(zip(on.tolist(), held_w.tolist(), held_s.tolist(), strict=True))
        slots.append(
            SlotRun(
                t=t,
                workers=int(model.counts[option]),
                ps=int(model.ps[option]),
                layout=layout,
            )
        )
    return slots, _flattened(columns)


def _flattened(
    columns: Sequence[tuple[IntArray, IntArray, IntArray, IntArray]],
) -> tuple[IntArray, IntArray, IntArray, IntArray]:
    """Per-slot (slot, server, workers, servers) columns joined, in slot order."""
    if not columns:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, empty
    if len(columns) == 1:
        return columns[0]
    t, h, w, s = (np.concatenate(parts) for parts in zip(*columns, strict=True))
    return t, h, w, s


def _priced(
    market: Market, model: JobModel, cells: tuple[IntArray, IntArray, IntArray, IntArray]
) -> tuple[FloatArray, FloatArray]:
    """Cost per resource of running `cells` at the market's prices (the current slot pro
    rata), and what each cell holds of each resource."""
    t, servers, workers, ps = cells
    held: FloatArray = workers[:, None] * model.worker_demand + ps[:, None] * model.ps_demand
    if not len(t):
        return np.zeros(_K), held
    share = np.where(t == 0, market.first_fraction, 1.0)[:, None]
    prices = market.priced(int(t.max()) + 1)
    priced: FloatArray = (share * prices[t, servers] * held).sum(axis=0)
    return priced, held


def _why_none(
    market: Market, model: JobModel, stopped_by_value: bool, total: int, fastest: int
) -> str:
    job = model.job
    if stopped_by_value:
        return (
            "its utility falls to zero before any schedule can finish it "
            f"({_utility_text(model.utility)})"
        )
    fit = _fitting(market.capacity, model.worker_demand, 1)
    fit[market.gpu_memory < job.gpu_memory_gb] = 0
    if not fit.any():
        return (
            f"no schedulable node can hold one worker ({counted(job.gpus_per_worker, 'GPU')}, "
            f"{counted(float(job.cpus_per_worker), 'CPU')}, "
            f"{job.memory_gb_per_worker:g} GB memory, "
            f"{job.gpu_memory_gb:g} GB GPU memory)"
        )
    needed = math.ceil(total / fastest) if fastest > 0 else math.inf
    if needed > market.horizon:
        return (
            f"even at {counted(int(model.counts[-1]), 'worker')} it needs {needed} slots of "
            f"{market.params.slot_s:g} s, more than the horizon of {market.horizon}"
        )
    return (
        f"no schedule finishes within the horizon of {market.horizon} slots on the capacity "
        f"left; the binding resource is {market.binding_resource(model)}"
    )


def _utility_text(utility: Utility) -> str:
    if isinstance(utility, StepUtility):
        return f"deadline {utility.deadline_s:g} s after submission"
    return f"sigmoid, value {utility.value:g}, midpoint {utility.midpoint_s:g} s"


# -- schedules as plans -------------------------------------------------------------------------


def plan_of(schedule: Schedule) -> Plan:
    """The schedule as the plan committed for its job."""
    return Plan(segments=schedule.segments, utility=schedule.utility, cost=schedule.cost)


def _segments(market: Market, slots: Sequence[SlotRun]) -> list[Segment]:
    """Slots in absolute slots and node ids (each slot's nodes by id), runs of identical
    slots merged."""
    segments: list[Segment] = []
    for slot in slots:
        absolute = market.first_slot + slot.t
        nodes = tuple(sorted((market.node_ids[h], w, s) for h, w, s in slot.layout))
        last = segments[-1] if segments else None
        if (
            last is not None
            and last.until == absolute
            and (last.workers, last.ps, last.nodes) == (slot.workers, slot.ps, nodes)
        ):
            segments[-1] = Segment(
                first=last.first, until=absolute + 1, workers=last.workers, ps=last.ps, nodes=nodes
            )
        else:
            segments.append(
                Segment(
                    first=absolute,
                    until=absolute + 1,
                    workers=slot.workers,
                    ps=slot.ps,
                    nodes=nodes,
                )
            )
    return segments


def reconcile(
    plan: Plan, current: int, runs: tuple[Assignment, ...] | None, gpus_per_worker: int, ps: int
) -> Plan:
    """Cut the past off `plan`; if the job runs, its current slot becomes what runs.

    The snapshot (or the decision) wins over the plan: the workers and nodes a job
    really has in the current slot replace the planned ones there; its planned
    parameter servers stay (nothing else says where they are).
    """
    kept: list[Segment] = []
    planned_now: Segment | None = None
    for segment in plan.segments:
        if segment.until <= current:
            continue
        if segment.first <= current:
            planned_now = segment
        first = max(segment.first, current)
        if runs is not None and first == current:
            first = current + 1
        if first == segment.first:
            kept.append(segment)
        elif first < segment.until:
            kept.append(_starting(segment, first))
    if runs is not None:
        by_node: dict[str, list[int]] = {}
        for a in runs:
            by_node.setdefault(a.node_id, [0, 0])[0] += len(a.gpu_indices) // gpus_per_worker
        servers = planned_now.ps if planned_now is not None else ps
        if planned_now is not None:
            for node_id, _, count in planned_now.nodes:
                if count:
                    by_node.setdefault(node_id, [0, 0])[1] += count
        workers = sum(w for w, _ in by_node.values())
        now = Segment(
            first=current,
            until=current + 1,
            workers=workers,
            ps=servers,
            nodes=tuple(sorted((n, w, s) for n, (w, s) in by_node.items())),
        )
        kept.insert(0, now)
    elif len(kept) == len(plan.segments) and all(
        a is b for a, b in zip(kept, plan.segments, strict=True)
    ):
        return plan  # nothing to cut or replace (most plans, most rounds)
    return Plan(segments=tuple(kept), utility=plan.utility, cost=plan.cost)


def _starting(segment: Segment, first: int) -> Segment:
    """`segment` from slot `first` on (a later slot of its run)."""
    return Segment(
        first=first,
        until=segment.until,
        workers=segment.workers,
        ps=segment.ps,
        nodes=segment.nodes,
    )
