"""The event-driven core: the simulator plays the cluster manager around the engine.

Events are arrivals (trace row order within a second), completions, inference
load changes (which lend or reclaim servers when loaning is on) and round
timers, kept in a heap ordered by `(time, kind, sequence)`: at one instant,
completions free GPUs first, capacity changes next, then arrivals, then the
timer. After the events of an instant the simulator asks for a decision when
something a policy could act on changed: a job arrived, capacity changed, or a
job completed or the round timer fired while jobs wait (or elastic jobs run). A
decider whose pipeline settles (:func:`policies.protocols.policy_settles`) is not
asked on the timer, nor on arrivals none of which has room to start.
It builds the snapshot a cluster manager would send, gets a decision, checks it
(no GPU twice, only schedulable GPUs, every running job kept or preempted,
worker counts within bounds) and applies it: starts, preemptions (progress is
kept, the restart cost is paid on resuming), resizes (a restart too) and
rejections. A completion event carries its job's version, so a rate change
simply pushes a new event and the stale one is skipped when popped.

When inference needs loaned servers back, the simulator asks for a reclaim
(`ReclaimRequest(count=n)`) as a cluster manager would, checks the answer
(:func:`check_reclaim`: only loaned servers, the count asked, every job on a
returned server shrunk off it or preempted) and applies it: shrunk jobs keep
the GPUs the answer lists (a restart, as for any resize), preempted jobs are
suspended with their progress kept, the servers go back to inference.

There are no policy-specific branches: every policy is reached through a
:class:`~simulator.deciders.Decider`, i.e. `Pipeline.run` and
`policies.common.reclaim.run_reclaim` with the profile's reclaim policy in process,
or `POST /v1/decisions` and `POST /v1/reclaim` over HTTP.

Stepping (for learned policies)::

    sim = Simulation(jobs, cluster)
    snapshot = sim.reset(seed=1)           # first state that needs a decision
    while snapshot is not None:
        decision = my_policy(snapshot)     # any Decision, e.g. from Pipeline.decide
        snapshot, done = sim.step(decision)
    result = sim.result()

`Simulation.run(decider)` is that loop, timed. The run is deterministic for a
seed: the seed draws the machine speeds and each round's policy seed.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import cast

import numpy as np
from msgspec.structs import replace as replace_struct

from policies.common.reclaim import run_reclaim
from policies.common.wording import counted
from policies.decision import Decision, PlacementEntry, Verdict
from policies.model import (
    Assignment,
    InferenceLoad,
    Job,
    JobState,
    Node,
    Pool,
    ScalingRule,
    Snapshot,
    Tenant,
    ThroughputObservation,
    snapshot_problems,
)
from policies.profiles import Profile
from policies.reclaim_models import ReclaimRequest, ReclaimResult
from policies.registry import build_registry
from simulator.cluster import ClusterSpec
from simulator.inference import InferenceDemand, InferenceOptions, load_series
from simulator.metrics import JobRecord, SimulationResult, TimeSeries, compute_metrics
from simulator.perf import (
    ClusterPerf,
    JobShape,
    PerfOptions,
    PerfTables,
    bind_cluster,
    load_perf_tables,
)
from simulator.workload import JobSpec

# Event kinds, in the order they are handled at one instant.
_COMPLETE = 0
_INFERENCE = 1
_TIMER = 3

# Job states as plain strings and enum members bound once: in Python 3.11 every
# `JobState.RUNNING` lookup goes through the enum's descriptor, which shows in
# profiles of a loop that runs for every job of every round.
_PENDING = JobState.PENDING.value
_RUNNING = JobState.RUNNING.value
_SUSPENDED = JobState.SUSPENDED.value
_DONE = "done"  # beyond the snapshot's three states
_REJECTED = "rejected"
_STATE_RUNNING = JobState.RUNNING
_STATE_PENDING = JobState.PENDING
_REJECT = Verdict.REJECT


class SimulationError(RuntimeError):
    """The simulation cannot go on (an invalid decision, a broken snapshot)."""


class InvalidDecisionError(SimulationError):
    """A decision or reclaim answer that breaks the cluster's invariants; names every problem."""

    def __init__(self, problems: list[str], what: str = "decision") -> None:
        shown = "; ".join(problems[:5])
        more = f" (+{len(problems) - 5} more)" if len(problems) > 5 else ""
        super().__init__(f"invalid {what}: {shown}{more}")
        self.problems = problems


@dataclass(frozen=True)
class SimOptions:
    round_period_s: float = 60.0
    """Timer rounds every this many seconds while jobs wait or elastic jobs run (0: none)."""
    rounds_on_events: bool = True
    """Also decide right after arrivals and completions (else only on the timer)."""
    check_snapshots: bool = False
    """Run the full semantic validation on every snapshot (slow; for tests)."""
    reject_infeasible: bool = True
    """Reject on arrival a job asking for more GPUs than training can ever have."""
    stall_limit_s: float = 7 * 86400.0
    """Stop when nothing has run or arrived for this long, or when jobs run but none has
    worked for this long (each restarted again before its restart ended); jobs left are
    unfinished."""
    record_timeseries: bool = True


Reclaimer = Callable[[Snapshot, ReclaimRequest, int], ReclaimResult]
"""Answers a reclaim: `reclaimer(snapshot, request, seed)`, e.g. a decider's `reclaim`."""


def default_reclaimer() -> Reclaimer:
    """The reclaim policy of a profile that names none (`Profile.reclaim`'s default).

    Used only when the simulation is driven by something that cannot answer
    reclaims itself (a bare decision function in the stepping API).
    """
    choice = Profile(name="default").reclaim
    policy = build_registry().reclaim(choice.name, choice.params)

    def answer(snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
        return run_reclaim(policy, snapshot, request, seed)

    return answer


def _reclaimer_of(decide: object) -> Reclaimer | None:
    """The decider's own reclaim call (:class:`~simulator.deciders.Decider`), if it has one."""
    method = getattr(decide, "reclaim", None)
    return cast(Reclaimer, method) if callable(method) else None


class _SimJob:
    """A job's mutable state inside the simulator."""

    __slots__ = (
        "admitted",
        "attained",
        "base",
        "cost",
        "executed",
        "finish",
        "first_start",
        "gpus_held",
        "held_since",
        "last_t",
        "loaned_gpus",
        "note",
        "placement",
        "preemptions",
        "price_per_s",
        "ps_alloc",
        "rate",
        "restart_until",
        "restarts",
        "shape",
        "spec",
        "state",
        "version",
        "view",
        "work_done",
    )

    def __init__(self, spec: JobSpec, shape: JobShape, base: Job) -> None:
        self.spec = spec
        self.shape = shape
        self.base = base
        self.state: str = _PENDING
        self.admitted = False
        self.placement: tuple[Assignment, ...] = ()
        self.gpus_held = 0
        self.loaned_gpus = 0
        self.ps_alloc = 0
        self.rate = 0.0
        self.work_done = 0.0
        self.attained = 0.0
        self.executed = 0.0
        self.last_t = spec.submit_time
        self.restart_until = 0.0
        self.first_start: float | None = None
        self.finish: float | None = None
        self.preemptions = 0
        self.restarts = 0
        self.version = 0
        self.view: Job | None = None
        self.cost = 0.0
        self.price_per_s = 0.0
        self.held_since = 0.0
        self.note = ""

    def sync(self, t: float) -> None:
        """Bring service, run time and progress up to time `t`."""
        dt = t - self.last_t
        if dt <= 0:
            return
        if self.state == _RUNNING:
            self.attained += self.gpus_held * dt
            self.executed += dt
            productive = t - max(self.last_t, self.restart_until)
            if productive > 0:
                self.work_done = min(self.spec.duration_s, self.work_done + self.rate * productive)
        self.last_t = t


@dataclass
class _Accounting:
    """Cluster-wide integrals over time."""

    last_t: float = 0.0
    busy_gpus: int = 0
    capacity_gpus: int = 0
    busy_gpu_s: float = 0.0
    capacity_gpu_s: float = 0.0
    loaned_busy_gpus: int = 0
    """GPUs of loaned inference servers that training jobs hold."""
    loaned_busy_gpu_s: float = 0.0

    def advance(self, t: float) -> None:
        dt = t - self.last_t
        if dt > 0:
            self.busy_gpu_s += self.busy_gpus * dt
            self.capacity_gpu_s += self.capacity_gpus * dt
            self.loaned_busy_gpu_s += self.loaned_busy_gpus * dt
            self.last_t = t


@dataclass
class _Timing:
    decision_s: list[float] = field(default_factory=list)
    reclaim_s: list[float] = field(default_factory=list)
    wall_start: float = 0.0


@dataclass
class _ReclaimTally:
    """What reclaims did over a run (metrics `reclaims`, `servers_reclaimed`, ...)."""

    reclaims: int = 0
    servers: int = 0
    shrinks: int = 0
    preemptions: int = 0


class Simulation:
    """One trace on one cluster, stepped one decision at a time (see the module docstring)."""

    def __init__(
        self,
        jobs: Sequence[JobSpec],
        cluster: ClusterSpec,
        *,
        perf: PerfOptions | None = None,
        options: SimOptions | None = None,
        inference: InferenceOptions | None = None,
        tables: PerfTables | None = None,
        reclaimer: Reclaimer | None = None,
        seed: int = 0,
        cluster_id: str | None = None,
        initial_placements: Mapping[str, tuple[Assignment, ...]] | None = None,
    ) -> None:
        self.specs = list(jobs)
        # Jobs already running where the run begins (a what-if from a cluster's state):
        # each holds these GPUs from its arrival, without a restart.
        self.initial_placements = dict(initial_placements or {})
        for earlier, later in zip(self.specs, self.specs[1:], strict=False):
            if later.submit_time < earlier.submit_time:
                raise SimulationError(f"jobs must come in submission order: {later.id!r}")
        self.cluster = cluster
        self.perf_options = perf or PerfOptions()
        self.options = options or SimOptions()
        self.inference_options = inference or InferenceOptions()
        self.tables = tables or load_perf_tables()
        # An explicit reclaimer wins; else `run(decider)` uses the decider's (the profile's
        # reclaim policy); else, for bare decision functions, the default profile's.
        self.reclaimer = reclaimer
        self._reclaim_with: Reclaimer | None = reclaimer
        # Whether `run`'s decider settles (its `settles`: asked again with no event
        # since its last decision, it changes nothing); then timer rounds between
        # events are not asked. False for a stepping caller, who is asked every round.
        self._settling = False
        # Whether `run`'s decider gathers running jobs spread over several nodes onto
        # one (its `gathers`): then a completion that frees room for such a job is a
        # round even when nothing waits. False for a stepping caller.
        self._gathering = False
        self.cluster_id = cluster_id or cluster.name
        self.seed = seed
        self.base_nodes = cluster.build_nodes()
        self.reference_type = cluster.reference_gpu_type()
        self._node_price = {n.id: n.price_per_gpu_hour / 3600.0 for n in self.base_nodes}
        self._node_gpus = {n.id: n.gpus for n in self.base_nodes}
        self._pool_nodes = [n.id for n in self.base_nodes if n.pool is Pool.INFERENCE]
        self._training_types = sorted(
            {n.gpu_type for n in self.base_nodes if n.pool is Pool.TRAINING}
            | (
                {n.gpu_type for n in self.base_nodes if n.pool is Pool.INFERENCE}
                if self.inference_options.loan_idle
                else set()
            )
        )
        self._max_training_gpus = sum(
            n.gpus
            for n in self.base_nodes
            if n.pool is Pool.TRAINING or self.inference_options.loan_idle
        )
        self.demand: InferenceDemand | None = None
        if self._pool_nodes:
            pool = [n for n in self.base_nodes if n.pool is Pool.INFERENCE]
            self.demand = InferenceDemand(
                load_series(self.inference_options.series),
                pool_servers=len(pool),
                gpus_per_server=max(1, round(sum(n.gpus for n in pool) / len(pool))),
                options=self.inference_options,
            )
        tenants = sorted({s.tenant for s in self.specs})
        self._tenants = tuple(Tenant(id=t) for t in tenants)
        self._hint_cache: dict[tuple[str, int, int, ScalingRule], dict[int, float]] = {}
        self._type_hint_cache: dict[str, dict[str, float]] = {}
        self._init_state()

    # -- lifecycle ---------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Snapshot | None:
        """Start over (optionally with a new seed); return the first snapshot to decide on."""
        if seed is not None:
            self.seed = seed
        self._init_state()
        return self._advance()

    def _init_state(self) -> None:
        self.model: ClusterPerf = bind_cluster(
            self.tables, self.perf_options, self.base_nodes, self.reference_type, self.seed
        )
        # The clock starts at the first submission: utilisation and cost cover the makespan.
        self.now = self.specs[0].submit_time if self.specs else 0.0
        self._heap: list[tuple[float, int, int, int, int]] = []
        self._seq = 0
        self._next_arrival = 0
        self._jobs: dict[str, _SimJob] = {}
        self._active: dict[str, _SimJob] = {}
        self._finished: list[_SimJob] = []
        self._owner: dict[tuple[str, int], str] = {}
        self._waiting = 0
        self._running = 0
        self._elastic_running: dict[str, _SimJob] = {}
        self._spread_running: dict[str, _SimJob] = {}  # running over several nodes
        self._freed_nodes: set[str] = set()  # where completions freed GPUs this instant
        # Running jobs: their views move with the clock, so each round refreshes them.
        self._running_jobs: dict[str, _SimJob] = {}
        self._ps_running = 0  # running jobs with parameter servers (their count may change)
        self._timer_at: float | None = None
        self._loaned: set[str] = set()
        self._nodes = self.base_nodes
        self._open_of: tuple[tuple[Node, ...], frozenset[str]] = ((), frozenset())
        self._node_index = {n.id: i for i, n in enumerate(self.base_nodes)}
        self._schedulable = {n.id for n in self.base_nodes if n.schedulable_for_training}
        self._acct = _Accounting(
            last_t=self.now, capacity_gpus=sum(self._node_gpus[i] for i in self._schedulable)
        )
        self._cost_per_s = 0.0
        self._cost = 0.0
        self._round = 0
        self._preemptions = 0
        self._reclaim_tally = _ReclaimTally()
        self._last_progress_t = self.now
        self._last_work_t = self.now  # the latest instant some running job did work
        self._settled = False  # a settling decider was asked and nothing happened since
        self._pending_snapshot: Snapshot | None = None
        self._reported_placements: dict[str, tuple[Assignment, ...]] = {}
        self._moved: set[str] = set()  # started or moved since the last throughput report
        self.done = False
        self.series = TimeSeries()
        self._timing = _Timing(wall_start=time.perf_counter())
        self._inference_load = InferenceLoad()
        if self.demand is not None and self.inference_options.loan_idle:
            # Demand changes are events only when they move servers; otherwise every
            # snapshot reads the demand at its own time.
            self._push(self.now, _INFERENCE, 0)

    def step(self, decision: Decision) -> tuple[Snapshot | None, bool]:
        """Apply `decision` to the pending snapshot; advance to the next one (None when done)."""
        snapshot = self._pending_snapshot
        if snapshot is None:
            raise SimulationError("no decision is pending: call reset() first, or the run is over")
        changed = _changed_entries(snapshot, decision, self.holdings())
        if changed is None:
            problems = check_decision(snapshot, decision)
            if problems:
                raise InvalidDecisionError(problems)
        self._pending_snapshot = None
        self._apply(decision, changed)
        self._record()
        following = self._advance()
        return following, following is None

    def holdings(self) -> Holdings:
        """Who holds each GPU now: the running placements of the pending snapshot."""
        nodes = self._nodes
        if self._open_of[0] is not nodes:  # the node tuple changes only when servers move
            self._open_of = (nodes, frozenset(n.id for n in nodes if n.schedulable_for_training))
        return Holdings(self._owner, self._running, self._open_of[1], self._node_gpus)

    def run(
        self,
        decide: Callable[[Snapshot, int, str], Decision],
        on_progress: Callable[[int], None] | None = None,
    ) -> SimulationResult:
        """Run from the start with `decide(snapshot, seed, decision_id)`; return the result.

        Reclaims go to `decide.reclaim` when the decider has one (every
        :class:`~simulator.deciders.Decider` does: the profile's reclaim policy),
        unless the simulation was built with its own `reclaimer`. Throughput feedback
        goes to `decide.observe` before each round when the decider has one, unless
        its `learns_from_feedback` says it has no use for it.
        """
        self._reclaim_with = self.reclaimer or _reclaimer_of(decide)
        self._settling = bool(getattr(decide, "settles", False))
        self._gathering = bool(getattr(decide, "gathers", False))
        snapshot = self.reset()
        finished = 0
        observe = getattr(decide, "observe", None)
        if not getattr(decide, "learns_from_feedback", True):
            # Nothing would read the reports (a profile without a feedback learner):
            # they are not worked out, which changes nothing else in the run.
            observe = None
        while snapshot is not None:
            seed = self.round_seed()
            decision_id = f"sim-{self.seed}-{self._round:07d}"
            if observe is not None:
                # Feedback arrives between rounds, as `POST /v1/feedback` would bring it.
                observe(self.throughput_observations())
            started = time.perf_counter()
            decision = decide(snapshot, seed, decision_id)
            self._timing.decision_s.append(time.perf_counter() - started)
            snapshot, _ = self.step(decision)
            if on_progress is not None and len(self._finished) != finished:
                on_progress(len(self._finished) - finished)
                finished = len(self._finished)
        if on_progress is not None and len(self._finished) != finished:
            on_progress(len(self._finished) - finished)
        return self.result()

    def throughput_observations(self) -> list[ThroughputObservation]:
        """What a cluster manager would report back this round: for every job that started
        (or moved) since the last report, the speed of its workers on each of its nodes
        relative to its table speed there.

        That is the node's own speed factor (`ClusterPerf.node_factor`), observed with the
        same spread as the machines' (the median per-job CoV of
        `pai_worker_minibatch_cov.csv`: a worker's mini-batch times vary around its
        machine's mean by about that much). Seeded by the run's seed and the round; none
        without machine variation (every machine is then the table's).
        """
        if not self.perf_options.machine_variation:
            return []
        out: list[ThroughputObservation] = []
        if not self._moved:
            return out
        sigma = math.sqrt(math.log1p(self.tables.machine_cov**2))
        # Made only when there is news: seeding a generator costs more than a round's
        # bookkeeping, and a round without news draws nothing from it.
        rng: np.random.Generator | None = None
        reported = self._reported_placements
        # Only jobs that started or moved since the last report can have news: `_hold`
        # notes them, in the order of `_active` they are then walked in.
        moved, self._moved = self._moved, set()
        active = self._active
        jobs = self._jobs
        for job_id in sorted(moved, key=lambda i: jobs[i].spec.index):
            job = active.get(job_id)
            if job is None or job.state != _RUNNING or reported.get(job_id) == job.placement:
                continue
            reported[job_id] = job.placement
            if rng is None:
                rng = np.random.default_rng([self.seed, self._round, 0x0B5E])
            for assignment in job.placement:
                factor = self.model.node_factor[assignment.node_id]
                noise = math.exp(sigma * float(rng.standard_normal()))
                out.append(
                    ThroughputObservation(
                        node_id=assignment.node_id,
                        job_id=job_id,
                        model=job.shape.family,
                        relative_speed=factor * noise,
                    )
                )
        return out

    def round_seed(self) -> int:
        """The policy seed of the pending round: fixed by the run's seed and the round index."""
        return (self.seed * 1_000_003 + self._round) % (2**31)

    def reclaim_seed(self) -> int:
        """The seed of the next reclaim: fixed by the run's seed and the reclaim's index."""
        return (self.seed * 1_000_033 + 500_000_003 + self._reclaim_tally.reclaims) % (2**31)

    @property
    def pending_snapshot(self) -> Snapshot | None:
        return self._pending_snapshot

    # -- events ------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, ref: int, version: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, kind, self._seq, ref, version))

    def _next_time(self) -> float | None:
        candidates = []
        if self._heap:
            candidates.append(self._heap[0][0])
        if self._next_arrival < len(self.specs):
            candidates.append(self.specs[self._next_arrival].submit_time)
        return min(candidates) if candidates else None

    def _alive(self) -> bool:
        return self._next_arrival < len(self.specs) or self._running > 0 or self._waiting > 0

    def _advance(self) -> Snapshot | None:
        """Process events until a decision is needed; return its snapshot (None: finished)."""
        while True:
            t = self._next_time()
            if t is None or self._stalled(t):
                self._finish_run()
                return None
            self._set_time(t)
            arrived = completed = capacity_changed = timer = False
            self._freed_nodes.clear()
            while self._heap and self._heap[0][0] <= t and self._heap[0][1] < 2:
                _, kind, _, ref, version = heapq.heappop(self._heap)
                if kind == _COMPLETE:
                    completed |= self._complete(ref, version)
                else:
                    capacity_changed |= self._inference_change()
            first_arrival = self._next_arrival
            while (
                self._next_arrival < len(self.specs)
                and self.specs[self._next_arrival].submit_time <= t
            ):
                self._arrive(self.specs[self._next_arrival])
                self._next_arrival += 1
                arrived = True
            while self._heap and self._heap[0][0] <= t:
                _, kind, _, ref, version = heapq.heappop(self._heap)
                if kind == _TIMER:
                    if self._timer_at == t:
                        self._timer_at = None
                        timer = True
                elif kind == _COMPLETE:  # pragma: no cover - same instant, pushed late
                    completed |= self._complete(ref, version)
                else:
                    capacity_changed |= self._inference_change()
            if (
                arrived
                and self._settled
                and not (completed or capacity_changed)
                and self._none_can_start(self.specs[first_arrival : self._next_arrival])
            ):
                # A pipeline that settles, asked now, would only admit them (its
                # admission admits every job): none has room, and no other job gains any.
                arrived = False
            if arrived or completed or capacity_changed:
                self._settled = False
            wanting = self._wanting()
            # A pipeline that settles, asked with no event since its last round, would
            # change nothing: the timer's round is not asked.
            need = timer and wanting and not self._settled
            if self.options.rounds_on_events:
                need = (
                    need
                    or arrived
                    or capacity_changed
                    or (completed and (wanting or self._could_gather()))
                )
            if need:
                self._pending_snapshot = self._snapshot()
                return self._pending_snapshot
            self._record()
            self._schedule_timer()

    def _could_gather(self) -> bool:
        """Whether a gathering decider could move a spread running job onto one node now:
        some node where a completion freed GPUs has room for all of such a job, counting
        the GPUs it holds there. Only those nodes changed since the last round, after
        which nothing was left to gather (the engine repeats its passes until then)."""
        if not (self._gathering and self._freed_nodes and self._spread_running):
            return False
        owner, sizes = self._owner, self._node_gpus
        free = {
            node_id: sum((node_id, g) not in owner for g in range(sizes[node_id]))
            for node_id in self._freed_nodes
        }
        for job in self._spread_running.values():
            own = {a.node_id: len(a.gpu_indices) for a in job.placement}
            if any(count + own.get(node_id, 0) >= job.gpus_held for node_id, count in free.items()):
                return True
        return False

    def _none_can_start(self, arrivals: Sequence[JobSpec]) -> bool:
        """Whether no job of `arrivals` could start on the GPUs free now, even at its
        smallest count. A job rejected on arrival does not count; one started on arrival
        (from the initial placements) is news, so the answer is then False.

        Running jobs hold only GPUs of nodes open to training (the decision check sees
        to it, and a reclaim moves jobs off a server before it closes), so the free
        GPUs are the open ones less the busy ones.
        """
        free = self._acct.capacity_gpus - self._acct.busy_gpus
        for spec in arrivals:
            job = self._jobs[spec.id]
            if job.state == _REJECTED:
                continue
            if job.state != _PENDING or spec.min_workers * spec.gpus_per_worker <= free:
                return False
        return True

    def _wanting(self) -> bool:
        """Could a round do anything now? Jobs wait, or an elastic job could grow."""
        if self._waiting > 0:
            return True
        if self._acct.busy_gpus >= self._acct.capacity_gpus:
            return False
        return any(
            job.gpus_held < job.spec.max_workers * job.spec.gpus_per_worker
            for job in self._elastic_running.values()
        )

    def _stalled(self, t: float) -> bool:
        if self._next_arrival < len(self.specs):
            return False
        if self._running > 0:
            # Jobs run, yet a policy that resizes or preempts them again before their
            # restart ends (restarts take up to minutes, rounds come every minute) keeps
            # every one from working: without this the run would never end.
            return t - self._last_work_t > self.options.stall_limit_s and not self._working(t)
        if self._waiting == 0:
            return True
        # Jobs wait, nothing runs and nothing will arrive. A later round may still start
        # them (a policy may defer a job to a cheaper slot, or promote a starving one),
        # so the timer keeps asking until nothing has happened for the stall limit.
        return t - self._last_progress_t > self.options.stall_limit_s

    def _working(self, t: float) -> bool:
        """Whether a running job works at `t` (past its restart, at a positive rate); if so
        `t` is the latest instant of work. Asked only once no work is known for the stall
        limit, so it does not walk the running jobs every event."""
        for job in self._running_jobs.values():
            if job.rate > 0 and job.restart_until < t:
                self._last_work_t = t
                return True
        return False

    def _set_time(self, t: float) -> None:
        self._acct.advance(t)
        self._cost += self._cost_per_s * max(0.0, t - self.now)
        self.now = t

    def _schedule_timer(self) -> None:
        period = self.options.round_period_s
        if period <= 0 or self._timer_at is not None:
            return
        if not self._wanting():
            return
        at = (math.floor(self.now / period) + 1) * period
        self._timer_at = at
        self._push(at, _TIMER, 0)

    def _arrive(self, spec: JobSpec) -> None:
        shape = JobShape(
            family=spec.family,
            gpus_per_worker=spec.gpus_per_worker,
            workers=spec.workers,
            ps=spec.ps,
        )
        job = _SimJob(spec, shape, self._base_view(spec, shape))
        self._jobs[spec.id] = job
        self._last_progress_t = self.now
        if self.options.reject_infeasible and (
            spec.min_workers * spec.gpus_per_worker > self._max_training_gpus
        ):
            job.state = _REJECTED
            job.note = (
                f"needs {counted(spec.min_workers * spec.gpus_per_worker, 'GPU')}; training "
                f"can have at most {self._max_training_gpus}"
            )
            self._finished.append(job)
            return
        self._active[spec.id] = job
        self._waiting += 1
        start = self.initial_placements.get(spec.id)
        if start:
            self._hold(job, start, spec.ps)

    def _complete(self, ref: int, version: int) -> bool:
        spec = self.specs[ref]
        job = self._jobs[spec.id]
        if job.version != version or job.state != _RUNNING:
            return False  # superseded by a rate change, a preemption or a resize
        job.sync(self.now)
        job.work_done = spec.duration_s
        if self._gathering and self._spread_running:
            self._freed_nodes.update(a.node_id for a in job.placement)
        self._release(job)
        job.state = _DONE
        job.finish = self.now
        del self._active[spec.id]
        self._finished.append(job)
        self._last_progress_t = self.now
        return True

    # -- inference pool and loaning ------------------------------------------------------------
    def _inference_change(self) -> bool:
        """Update demand; lend idle servers or reclaim loaned ones. True if capacity changed."""
        assert self.demand is not None
        needed = self.demand.servers_needed(self.now)
        changed = False
        if self.inference_options.loan_idle:
            target = max(0, len(self._pool_nodes) - needed)
            if target > len(self._loaned):
                free = [n for n in self._pool_nodes if n not in self._loaned]
                for node_id in free[: target - len(self._loaned)]:
                    self._set_loaned(node_id, True)
                changed = True
            elif target < len(self._loaned):
                self._reclaim(len(self._loaned) - target)
                changed = True
        if self._alive():
            nxt = self.demand.next_change(self.now)
            if nxt is not None:
                self._push(nxt, _INFERENCE, 0)
        return changed

    def _set_loaned(self, node_id: str, loaned: bool) -> None:
        i = self._node_index[node_id]
        nodes = list(self._nodes)
        nodes[i] = replace_struct(self.base_nodes[i], loaned=loaned)
        self._nodes = tuple(nodes)
        if loaned:
            self._loaned.add(node_id)
            self._schedulable.add(node_id)
            self._acct.capacity_gpus += self._node_gpus[node_id]
        else:
            self._loaned.discard(node_id)
            self._schedulable.discard(node_id)
            self._acct.capacity_gpus -= self._node_gpus[node_id]

    def _reclaim(self, count: int) -> None:
        """Ask which `count` loaned servers go back, check the answer, apply it."""
        if self._reclaim_with is None:
            self._reclaim_with = default_reclaimer()
        snapshot = self._snapshot()
        request = ReclaimRequest(count=count)
        started = time.perf_counter()
        answer = self._reclaim_with(snapshot, request, self.reclaim_seed())
        self._timing.reclaim_s.append(time.perf_counter() - started)
        problems = check_reclaim(snapshot, request, answer)
        if problems:
            raise InvalidDecisionError(problems, what="reclaim answer")
        tally = self._reclaim_tally
        tally.reclaims += 1
        tally.servers += len(answer.servers)
        for entry in answer.shrink:
            # As a cluster manager would: stop the workers on returned servers and
            # restart the job on the GPUs it keeps (a resize, with its restart cost).
            job = self._active[entry.job_id]
            ps = job.ps_alloc
            job.sync(self.now)
            self._release(job)
            self._hold(job, entry.assignments, ps)
            tally.shrinks += 1
        for job_id in answer.preempt:
            self._preempt(self._active[job_id])
            tally.preemptions += 1
        for node_id in answer.servers:
            self._set_loaned(node_id, False)

    # -- snapshot ------------------------------------------------------------------------------
    def _base_view(self, spec: JobSpec, shape: JobShape) -> Job:
        elastic = spec.min_workers < spec.max_workers
        speedup: dict[int, float] = {}
        if elastic:
            key = (spec.family, spec.min_workers, spec.max_workers, spec.scaling_rule)
            cached = self._hint_cache.get(key)
            if cached is None:
                probe = Job(
                    id="probe",
                    workers=spec.workers,
                    min_workers=spec.min_workers,
                    max_workers=spec.max_workers,
                    scaling_rule=spec.scaling_rule,
                )
                cached = self.model.speedup_hints(shape, probe.allowed_worker_counts())
                self._hint_cache[key] = cached
            speedup = cached
        type_speed: dict[str, float] = {}
        if len(self._training_types) > 1:
            found = self._type_hint_cache.get(spec.family)
            if found is None:
                found = self.model.gpu_type_hints(shape, self._training_types)
                self._type_hint_cache[spec.family] = found
            type_speed = found
        return Job(
            id=spec.id,
            tenant=spec.tenant,
            submit_time=spec.submit_time,
            gpus_per_worker=spec.gpus_per_worker,
            workers=spec.workers,
            min_workers=spec.min_workers,
            max_workers=spec.max_workers,
            scaling_rule=spec.scaling_rule,
            ps=spec.ps,
            max_ps=spec.max_ps,
            model=spec.family,
            total_work=spec.duration_s,
            estimated_duration_s=spec.estimate_s,
            speedup=speedup,
            gpu_type_speed=type_speed,
            utility=spec.utility,
        )

    def _view(self, job: _SimJob) -> Job:
        """The view of a job that holds no GPUs, kept until its state changes."""
        if job.view is None:
            if job.first_start is None and not job.admitted:
                job.view = job.base
            else:
                job.view = replace_struct(
                    job.base,
                    state=JobState(job.state),
                    admitted=job.admitted,
                    work_done=job.work_done,
                    attained_service_gpu_s=job.attained,
                    executed_time_s=job.executed,
                )
        return job.view

    def _views(self) -> tuple[Job, ...]:
        """Every active job's view, in arrival order: what `_view` gives each.

        Each job keeps its view between rounds until its state changes (admission,
        preemption, a start or a move drop it). A running job's service and progress
        move with the clock, so its view is new every round: the previous one with
        those three numbers replaced (its placement and allocation are fixed while it
        runs; `_hold` drops the view when they change). A round therefore refreshes the
        running jobs and rebuilds the views that were dropped; every other job costs one
        step of the final pass. `_SimJob.sync` is inlined, step for step, so the numbers
        are exactly those it computes.
        """
        now = self.now
        running_state = _STATE_RUNNING
        for job in self._running_jobs.values():
            last = job.last_t
            dt = now - last
            if dt > 0:
                job.attained += job.gpus_held * dt
                job.executed += dt
                restart_until = job.restart_until
                productive = now - (last if last >= restart_until else restart_until)
                if productive > 0:
                    done = job.work_done + job.rate * productive
                    duration = job.spec.duration_s
                    job.work_done = duration if duration <= done else done
                job.last_t = now
            view = job.view
            if view is None:
                view = replace_struct(
                    job.base,
                    state=running_state,
                    admitted=True,
                    placement=job.placement,
                    ps=job.ps_alloc if job.spec.ps else 0,
                    work_done=job.work_done,
                    attained_service_gpu_s=job.attained,
                    executed_time_s=job.executed,
                )
            else:
                view = replace_struct(
                    view,
                    work_done=job.work_done,
                    attained_service_gpu_s=job.attained,
                    executed_time_s=job.executed,
                )
            job.view = view
        view_of = self._view
        return tuple([job.view or view_of(job) for job in self._active.values()])

    def _snapshot(self) -> Snapshot:
        if self.demand is not None:
            self._inference_load = InferenceLoad(
                servers_needed=self.demand.servers_needed(self.now),
                forecast=self.demand.forecast(self.now),
            )
        snapshot = Snapshot(
            cluster_id=self.cluster_id,
            now=self.now,
            nodes=self._nodes,
            jobs=self._views(),
            tenants=self._tenants,
            inference=self._inference_load,
        )
        if self.options.check_snapshots:
            problems = snapshot_problems(snapshot)
            if problems:
                raise SimulationError(
                    "simulator built an invalid snapshot: "
                    + "; ".join(f"{p.path}: {p.message}" for p in problems[:5])
                )
        return snapshot

    # -- applying a decision ---------------------------------------------------------------------
    def _apply(self, decision: Decision, changed: Sequence[PlacementEntry] | None) -> None:
        """Apply a checked decision; `changed`: its placement entries other than running
        jobs handed back their very placement object (None: not known, walk them all)."""
        self._round += 1
        acted = False
        for entry in decision.admission:
            job = self._active[entry.job_id]
            if entry.verdict is _REJECT:
                job.state = _REJECTED
                job.note = entry.reason
                del self._active[job.spec.id]
                self._waiting -= 1
                self._finished.append(job)
                acted = True
            elif entry.admitted and not job.admitted:
                job.admitted = True
                job.view = None
                acted = True
        scaled_ps: dict[str, int] | None = None  # built when a job with servers needs it
        for note in decision.preemptions:
            self._preempt(self._active[note.job_id])
            acted = True
        # A kept job with parameter servers may still change their count: then every
        # entry is looked at, in the decision's order.
        entries = decision.placement if changed is None or self._ps_running else changed
        moving: list[tuple[_SimJob, tuple[Assignment, ...], int]] = []
        active = self._active
        for target in entries:
            job = active[target.job_id]
            assignments = target.assignments
            ps = 0
            if job.spec.ps:
                if scaled_ps is None:
                    scaled_ps = {r.job_id: r.ps for r in decision.scaling}
                ps = scaled_ps.get(target.job_id, job.spec.ps)
            if job.state == _RUNNING:
                # Kept jobs come back with their very placement object: the common case.
                if (
                    job.placement is assignments or _same_gpus(job.placement, assignments)
                ) and ps == job.ps_alloc:
                    continue
                job.sync(self.now)
                self._release(job)
            moving.append((job, assignments, ps))
        for job, assignments, ps in moving:
            self._hold(job, assignments, ps)
            acted = True
        if acted:
            self._last_progress_t = self.now
        self._settled = self._settling
        self._schedule_timer()

    def _preempt(self, job: _SimJob) -> None:
        job.sync(self.now)
        self._release(job)
        # Progress is kept (checkpointed); the restart cost is paid when it resumes.
        job.state = _SUSPENDED
        job.view = None
        job.preemptions += 1
        self._preemptions += 1
        self._waiting += 1

    def _release(self, job: _SimJob) -> None:
        """Take every GPU from a running job (in sync with `now`); the caller sets its state."""
        if job.rate > 0 and job.restart_until < self.now:
            self._last_work_t = self.now  # it worked until now (then finished or stopped)
        for a in job.placement:
            for g in a.gpu_indices:
                del self._owner[(a.node_id, g)]
        self._acct.busy_gpus -= job.gpus_held
        self._acct.loaned_busy_gpus -= job.loaned_gpus
        job.loaned_gpus = 0
        self._cost_per_s -= job.price_per_s
        job.cost += job.price_per_s * (self.now - job.held_since)
        self._elastic_running.pop(job.spec.id, None)
        self._spread_running.pop(job.spec.id, None)
        del self._running_jobs[job.spec.id]
        if job.spec.ps:
            self._ps_running -= 1
        self._running -= 1
        job.version += 1  # its completion event, if any, is now stale
        job.placement = ()
        job.gpus_held = 0
        job.price_per_s = 0.0

    def _hold(self, job: _SimJob, assignments: tuple[Assignment, ...], ps: int) -> None:
        """Give GPUs to a job (waiting, or running and just released) and time its completion."""
        for a in assignments:
            for g in a.gpu_indices:
                holder = self._owner.get((a.node_id, g))
                if holder is not None:
                    raise SimulationError(
                        f"GPU {g} of {a.node_id!r} given to {job.spec.id!r} "
                        f"while {holder!r} holds it"
                    )
                self._owner[(a.node_id, g)] = job.spec.id
        job.sync(self.now)
        if job.state != _RUNNING:
            self._waiting -= 1
        job.state = _RUNNING
        job.admitted = True
        job.view = None
        job.placement = assignments
        self._moved.add(job.spec.id)
        job.gpus_held = sum(len(a.gpu_indices) for a in assignments)
        job.ps_alloc = ps
        job.held_since = self.now
        job.price_per_s = sum(self._node_price[a.node_id] * len(a.gpu_indices) for a in assignments)
        self._cost_per_s += job.price_per_s
        self._acct.busy_gpus += job.gpus_held
        if self._loaned:
            # A server stays loaned while a job holds it: a reclaim moves the job off first.
            job.loaned_gpus = sum(
                len(a.gpu_indices) for a in assignments if a.node_id in self._loaned
            )
            self._acct.loaned_busy_gpus += job.loaned_gpus
        self._running += 1
        self._running_jobs[job.spec.id] = job
        if job.spec.ps:
            self._ps_running += 1
        if job.spec.min_workers < job.spec.max_workers:
            self._elastic_running[job.spec.id] = job
        if len(assignments) > 1:
            self._spread_running[job.spec.id] = job
        if job.first_start is None:
            # The trace's duration already includes the job's own start-up.
            job.first_start = self.now
            job.restart_until = self.now
        else:
            job.restarts += 1
            job.restart_until = self.now + self.model.restart_s(job.spec.family)
        job.rate = self.model.rate(job.shape, assignments, ps)
        job.version += 1
        if job.rate > 0:
            left = job.spec.duration_s - job.work_done
            self._push(job.restart_until + left / job.rate, _COMPLETE, job.spec.index, job.version)

    # -- results -------------------------------------------------------------------------------
    def _record(self) -> None:
        if self.options.record_timeseries:
            self.series.add(
                self.now,
                self._waiting,
                self._running,
                self._acct.busy_gpus,
                self._acct.capacity_gpus,
            )

    def _finish_run(self) -> None:
        if self.done:
            return
        self.done = True
        self._pending_snapshot = None
        self._record()

    def result(self) -> SimulationResult:
        """Per-job records, metrics and time series of the run so far."""
        records = [self._record_of(j) for j in self._finished]
        records += [self._record_of(j) for j in self._active.values()]
        records.sort(key=lambda r: r.index)
        metrics = compute_metrics(
            records,
            busy_gpu_s=self._acct.busy_gpu_s,
            capacity_gpu_s=self._acct.capacity_gpu_s,
            cost_usd=self._cost,
            preemptions=self._preemptions,
            decision_s=self._timing.decision_s,
            wall_s=time.perf_counter() - self._timing.wall_start,
        )
        tally = self._reclaim_tally
        metrics.update(
            reclaims=tally.reclaims,
            servers_reclaimed=tally.servers,
            reclaim_shrinks=tally.shrinks,
            reclaim_preemptions=tally.preemptions,
            reclaim_wall_s=float(sum(self._timing.reclaim_s)),
            loaned_gpu_hours=self._acct.loaned_busy_gpu_s / 3600.0,
        )
        return SimulationResult(metrics=metrics, jobs=records, series=self.series)

    def _record_of(self, job: _SimJob) -> JobRecord:
        spec = job.spec
        if job.state == _DONE:
            status = "completed"
        elif job.state == _REJECTED:
            status = "rejected"
        else:
            status = "unfinished"
        if job.state == _RUNNING:
            job.sync(self.now)
        cost = job.cost + (
            job.price_per_s * (self.now - job.held_since) if job.state == _RUNNING else 0.0
        )
        return JobRecord(
            index=spec.index,
            job_id=spec.id,
            tenant=spec.tenant,
            family=spec.family,
            gpus=spec.workers * spec.gpus_per_worker,
            submit_s=spec.submit_time,
            recorded_duration_s=spec.duration_s,
            first_start_s=job.first_start,
            finish_s=job.finish,
            run_s=job.executed,
            gpu_s=job.attained,
            preemptions=job.preemptions,
            restarts=job.restarts,
            cost_usd=cost,
            status=status,
            note=job.note,
            utility=spec.utility,
        )


def _unchanged(a: tuple[Assignment, ...], b: tuple[Assignment, ...]) -> bool:
    """Same assignments; the engine hands kept placements back as the very same objects."""
    if len(a) != len(b):
        return False
    if len(a) == 1:  # the common case, and the hottest line of the check
        return a[0] is b[0] or a[0] == b[0]
    return all(x is y for x, y in zip(a, b, strict=True)) or a == b


def _same_gpus(a: tuple[Assignment, ...], b: tuple[Assignment, ...]) -> bool:
    if _unchanged(a, b):
        return True
    return {(x.node_id, g) for x in a for g in x.gpu_indices} == {
        (x.node_id, g) for x in b for g in x.gpu_indices
    }


@dataclass(frozen=True)
class Holdings:
    """What the simulator knows of the snapshot it built: who holds each GPU, how many run,
    which nodes training may use.

    `gpus` maps `(node id, GPU index)` to the running job holding it, exactly the
    placements of the snapshot's running jobs; `running` counts those jobs;
    `open_nodes` are the ids of the snapshot's nodes open to training (healthy, and
    in the training pool or loaned), `node_gpus` every node's GPU count by id.
    """

    gpus: dict[tuple[str, int], str]
    running: int
    open_nodes: AbstractSet[str]
    node_gpus: Mapping[str, int]


def decision_is_valid(snapshot: Snapshot, decision: Decision, known: Holdings) -> bool:
    """True only if :func:`check_decision` finds nothing wrong; False when unsure.

    The simulator's round-by-round check, proportional to what the decision changes
    rather than to the jobs running: a running job handed back its very placement
    object (the engine keeps placements that way) is not looked at again unless a
    node it may use has closed, and a GPU a changed placement takes is looked up in
    the simulator's own map of holders. Anything unusual answers False, and the
    caller then runs :func:`check_decision` for the problems (or for an empty list).
    """
    return _changed_entries(snapshot, decision, known) is not None


def _changed_entries(
    snapshot: Snapshot, decision: Decision, known: Holdings
) -> list[PlacementEntry] | None:
    """:func:`decision_is_valid`'s check; when valid, the placement entries it looked at.

    Those are every entry but the running jobs handed back their very placement
    object, in the decision's order: all that applying the decision needs to walk
    (with the kept jobs' parameter servers, which the caller looks at itself).
    None: not shown valid.
    """
    if decision.now != snapshot.now:
        return None
    jobs = snapshot.jobs_by_id
    running_state = _STATE_RUNNING
    newly: dict[str, bool] = {}
    for verdict in decision.admission:
        job = jobs.get(verdict.job_id)
        if job is None or job.state is not _STATE_PENDING or job.admitted:
            return None
        if verdict.verdict is _REJECT:
            newly[verdict.job_id] = False  # placing a rejected job is a problem
        else:
            newly[verdict.job_id] = verdict.admitted
    entries = decision.placement
    placed = {e.job_id for e in entries}
    if len(placed) != len(entries):
        return None
    found: Job | None = None
    changed = [
        e
        for e in entries
        if (found := jobs.get(e.job_id)) is None
        or found.state is not running_state
        or found.placement is not e.assignments
    ]
    open_nodes = known.open_nodes
    if len(open_nodes) != len(snapshot.nodes):
        closed = {n.id for n in snapshot.nodes} - open_nodes
        if any(node_id in closed for node_id, _ in known.gpus):
            return None  # a running job on a closed node: let the full check say who
    node_gpus = known.node_gpus
    moved: set[str] = set()
    used: dict[tuple[str, int], str] = {}
    placed_running = len(entries)
    for entry in changed:
        job = jobs.get(entry.job_id)
        if job is None:
            return None
        if job.state is running_state:
            if _unchanged(entry.assignments, job.placement):
                continue  # kept, with an equal placement object
            moved.add(job.id)
        else:
            placed_running -= 1
            if job.state is _STATE_PENDING and not job.admitted and not newly.get(job.id, False):
                return None
    for entry in changed:
        job = jobs[entry.job_id]
        if job.id not in moved and job.state is running_state:
            continue
        gpus = 0
        for a in entry.assignments:
            if a.node_id not in open_nodes:
                return None
            size = node_gpus[a.node_id]
            for g in a.gpu_indices:
                if not 0 <= g < size or (a.node_id, g) in used:
                    return None
                holder = known.gpus.get((a.node_id, g))
                if holder is not None and holder in placed and holder not in moved:
                    return None  # a kept job holds it
                used[(a.node_id, g)] = job.id
                gpus += 1
        if gpus == 0 or gpus % job.gpus_per_worker:
            return None
        if not job.accepts_workers(gpus // job.gpus_per_worker):
            return None
    preempted: set[str] = set()
    for note in decision.preemptions:
        job = jobs.get(note.job_id)
        if job is None or job.state is not running_state or note.job_id in placed:
            return None
        preempted.add(note.job_id)
    return changed if placed_running + len(preempted) == known.running else None


def check_decision(snapshot: Snapshot, decision: Decision) -> list[str]:
    """Every way `decision` breaks the cluster's invariants for `snapshot` (empty: valid).

    A running job kept exactly where it was is not re-checked GPU by GPU (the
    snapshot's own validation covers its placement); only its GPUs on nodes
    that new placements touch are, to catch a GPU given twice. That keeps the
    check proportional to what the decision changes.
    """
    problems: list[str] = []
    jobs = snapshot.jobs_by_id
    nodes = snapshot.nodes_by_id
    if decision.now != snapshot.now:
        problems.append(f"decision is for time {decision.now}, the snapshot for {snapshot.now}")
    rejected: set[str] = set()
    newly: dict[str, bool] = {}
    for verdict in decision.admission:
        job = jobs.get(verdict.job_id)
        if job is None:
            problems.append(f"admission: unknown job {verdict.job_id!r}")
            continue
        if job.state is not _STATE_PENDING or job.admitted:
            problems.append(f"admission: job {verdict.job_id!r} was not awaiting admission")
        if verdict.verdict is _REJECT:
            rejected.add(verdict.job_id)
        newly[verdict.job_id] = verdict.admitted
    placed: set[str] = set()
    kept: list[tuple[str, tuple[Assignment, ...]]] = []
    changed: list[tuple[Job, tuple[Assignment, ...]]] = []
    for entry in decision.placement:
        job = jobs.get(entry.job_id)
        if job is None:
            problems.append(f"placement: unknown job {entry.job_id!r}")
            continue
        if entry.job_id in placed:
            problems.append(f"placement: job {entry.job_id!r} placed twice")
        placed.add(entry.job_id)
        if job.state is _STATE_RUNNING and _unchanged(entry.assignments, job.placement):
            kept.append((job.id, entry.assignments))
            continue
        if entry.job_id in rejected:
            problems.append(f"placement: job {entry.job_id!r} is rejected in the same decision")
        if job.state is _STATE_PENDING and not job.admitted and not newly.get(job.id, False):
            problems.append(f"placement: job {entry.job_id!r} was not admitted")
        changed.append((job, entry.assignments))
    training = Pool.TRAINING
    open_nodes = {n.id for n in snapshot.nodes if n.healthy and (n.pool is training or n.loaned)}
    for job_id, assignments in kept:
        for a in assignments:
            if a.node_id not in open_nodes:
                problems.append(
                    f"placement: job {job_id!r} kept on node {a.node_id!r}, "
                    "which is not open to training"
                )
    touched = {a.node_id for _, assignments in changed for a in assignments}
    used: dict[tuple[str, int], str] = {}
    for job_id, assignments in kept:
        for a in assignments:
            if a.node_id in touched:
                for g in a.gpu_indices:
                    used[(a.node_id, g)] = job_id
    for job, assignments in changed:
        gpus = 0
        for a in assignments:
            node = nodes.get(a.node_id)
            if node is None:
                problems.append(f"placement: job {job.id!r} on unknown node {a.node_id!r}")
                continue
            if a.node_id not in open_nodes:
                problems.append(
                    f"placement: job {job.id!r} on node {a.node_id!r}, not open to training"
                )
            for g in a.gpu_indices:
                if not 0 <= g < node.gpus:
                    problems.append(f"placement: node {a.node_id!r} has no GPU {g}")
                    continue
                holder = used.get((a.node_id, g))
                if holder is not None:
                    problems.append(
                        f"placement: GPU {g} of {a.node_id!r} given to {holder!r} and {job.id!r}"
                    )
                used[(a.node_id, g)] = job.id
                gpus += 1
        if gpus == 0:
            problems.append(f"placement: job {job.id!r} placed on no GPU")
        elif gpus % job.gpus_per_worker:
            problems.append(f"placement: job {job.id!r} got {gpus} GPUs, not whole workers")
        elif not job.accepts_workers(gpus // job.gpus_per_worker):
            problems.append(
                f"placement: job {job.id!r} got {gpus // job.gpus_per_worker} workers, "
                f"outside [{job.lo}, {job.hi}] or its step rule"
            )
    preempted = set()
    for note in decision.preemptions:
        job = jobs.get(note.job_id)
        if job is None or job.state is not _STATE_RUNNING:
            problems.append(f"preemptions: job {note.job_id!r} was not running")
            continue
        if note.job_id in placed:
            problems.append(f"preemptions: job {note.job_id!r} is also placed")
        preempted.add(note.job_id)
    running = {j.id for j in snapshot.jobs if j.state is _STATE_RUNNING}
    for job_id in sorted(running - placed - preempted):
        problems.append(f"job {job_id!r} was running and is neither placed nor preempted")
    return problems


def check_reclaim(snapshot: Snapshot, request: ReclaimRequest, answer: ReclaimResult) -> list[str]:
    """Every way applying `answer` would break the cluster for `snapshot` (empty: valid).

    What a cluster manager must see before it acts: only loaned servers return,
    as many as were asked for (or exactly those named), and every job with GPUs on
    a returned server is either preempted or shrunk to GPUs it already holds off
    those servers, at a worker count it accepts; no other job is touched. The
    policy-level contract (costs, reasons, no needless preemption) is
    `policies.common.reclaim`'s to check.
    """
    problems: list[str] = []
    nodes = snapshot.nodes_by_id
    loaned = {n.id for n in snapshot.nodes if n.loaned}
    servers = answer.servers
    if len(set(servers)) != len(servers):
        problems.append(f"servers: a server is returned twice in {list(servers)}")
    for node_id in servers:
        if node_id not in nodes:
            problems.append(f"servers: unknown node {node_id!r}")
        elif node_id not in loaned:
            problems.append(f"servers: node {node_id!r} is not loaned")
    if request.count is not None and len(set(servers)) != min(request.count, len(loaned)):
        problems.append(
            f"servers: {len(set(servers))} returned, {request.count} asked ({len(loaned)} loaned)"
        )
    if request.node_ids is not None and set(servers) != set(request.node_ids):
        problems.append(f"servers: {sorted(servers)} returned, {sorted(request.node_ids)} named")
    returned = set(servers)
    jobs = snapshot.jobs_by_id
    affected = {
        job.id
        for job in snapshot.jobs
        if job.state is _STATE_RUNNING and any(a.node_id in returned for a in job.placement)
    }
    handled: set[str] = set()
    for entry in answer.shrink:
        job = jobs.get(entry.job_id)
        if entry.job_id in handled:
            problems.append(f"shrink: job {entry.job_id!r} handled twice")
        handled.add(entry.job_id)
        if job is None or job.state is not _STATE_RUNNING:
            problems.append(f"shrink: job {entry.job_id!r} is not running")
            continue
        if entry.job_id not in affected:
            problems.append(f"shrink: job {entry.job_id!r} has no GPU on a returned server")
        own = {(a.node_id, g) for a in job.placement for g in a.gpu_indices}
        kept = [(a.node_id, g) for a in entry.assignments for g in a.gpu_indices]
        if len(set(kept)) != len(kept):
            problems.append(f"shrink: job {job.id!r} keeps a GPU twice")
        if not set(kept) <= own:
            problems.append(f"shrink: job {job.id!r} keeps GPUs it does not hold")
        on_returned = sorted({n for n, _ in kept if n in returned})
        if on_returned:
            problems.append(f"shrink: job {job.id!r} keeps GPUs on returned {on_returned}")
        if len(kept) != entry.workers * job.gpus_per_worker:
            problems.append(
                f"shrink: job {job.id!r} keeps {len(kept)} GPUs for {entry.workers} workers"
            )
        if not job.accepts_workers(entry.workers) or entry.workers >= job.placed_workers:
            problems.append(
                f"shrink: job {job.id!r} to {entry.workers} workers from {job.placed_workers}, "
                f"outside [{job.lo}, {job.hi}], its step rule, or not fewer"
            )
    for job_id in answer.preempt:
        job = jobs.get(job_id)
        if job_id in handled:
            problems.append(f"preempt: job {job_id!r} handled twice")
        handled.add(job_id)
        if job is None or job.state is not _STATE_RUNNING:
            problems.append(f"preempt: job {job_id!r} is not running")
        elif job_id not in affected:
            problems.append(f"preempt: job {job_id!r} has no GPU on a returned server")
    for job_id in sorted(affected - handled):
        problems.append(
            f"job {job_id!r} has GPUs on a returned server and is neither shrunk nor preempted"
        )
    return problems
