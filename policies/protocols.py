"""One small contract per decision stage.

Each protocol is the whole agreement between the engine and a policy of that
stage: what the policy may assume about its inputs and what it must return.
Policies are pure: they read the context and their inputs and return new
values; the engine applies them and checks every invariant again, so a buggy
policy yields an error, never an invalid decision.

Every policy class also carries `name`, `version`, `stage`, a one-line
`summary`, its `source` (paper or system) and a nested pydantic `Params` model
whose fields describe its parameters; :mod:`policies.registry` relies on them.

State a policy needs beyond the snapshot (DESIGN §5) is explicit: a policy
names it with a `state_key`, reads it from :attr:`Context.state`, and, if it is
the one that writes the key, returns the new value from
:meth:`StatefulPolicy.commit`. The engine passes state in and hands updates
back (:meth:`policies.engine.Pipeline.run`); where it is kept is the caller's
business (the service: the cache, keyed by cluster).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

import msgspec
from pydantic import BaseModel, JsonValue

from policies.capacity import FreeCapacity
from policies.decision import AdmissionResult, Decision, ScalingResult, Stage
from policies.dispatch.model import DispatchChoice
from policies.dispatch.view import DispatchView
from policies.model import Assignment, Frozen, Job, Snapshot, ThroughputObservation
from policies.reclaim_models import ReclaimRequest, ReclaimResult

StateValue = JsonValue | msgspec.Struct
"""A policy state's value: JSON data, or a Struct of the writing policy's own, which is
stored as the JSON it encodes to. A caller that keeps state in memory between rounds
(the simulator) hands back what the commit returned; one that stores it (the service)
hands back JSON data; a policy reads either."""


class BudgetExceeded(Exception):
    """The decision's CPU budget is spent (raised by :meth:`CpuBudget.check`)."""

    def __init__(self, limit_s: float, used_s: float) -> None:
        super().__init__(
            f"ran past the decision's CPU budget of {limit_s * 1000:g} ms "
            f"({used_s * 1000:.0f} ms used)"
        )
        self.limit_s = limit_s
        self.used_s = used_s


class CpuBudget:
    """CPU time one decision may spend in its policies, counted on the deciding thread.

    Thread CPU time, not wall time: a decision that waits for the GIL or for the
    machine is not charged for it, so the same snapshot trips the budget on a busy
    replica no sooner than on an idle one. The engine checks it before each policy
    call; a policy whose single call can run long (a loop over every job) calls
    :meth:`Context.check_budget` inside that loop. It trips once: from then on each
    stage hands over to a plain heuristic, which finishes the decision unchecked.
    """

    __slots__ = ("armed", "limit_s", "started", "wall_started")

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self.wall_started = time.perf_counter()  # first: the wall span then covers the CPU one
        self.started = time.thread_time()
        self.armed = True

    def used_s(self) -> float:
        return time.thread_time() - self.started

    def check(self) -> None:
        # A thread cannot spend more CPU time than wall time has passed: until the wall
        # clock passes the limit, the budget cannot be spent, and the wall clock is read
        # without a system call (the thread's CPU clock needs one, on every policy call).
        if self.armed and time.perf_counter() - self.wall_started > self.limit_s:
            used = time.thread_time() - self.started
            if used > self.limit_s:
                self.armed = False
                raise BudgetExceeded(self.limit_s, used)


@dataclass(frozen=True)
class Context:
    """What every policy may read besides its direct inputs."""

    snapshot: Snapshot
    seed: int = 0
    gpus_by_tenant: dict[str, int] = field(default_factory=dict)
    """GPUs held by each tenant's running jobs when the round starts."""
    state: Mapping[str, StateValue] = field(default_factory=dict)
    """Policy state as loaded for this cluster before the round, by state key; read-only.

    Only the keys the pipeline's policies declare are present; a key never written
    before is absent. Policies must not modify it (the engine passes a read-only view).
    """
    admission: Mapping[str, AdmissionResult] = field(default_factory=dict)
    """This round's admission results by job id, for the stages after admission.

    Empty while admission itself runs. Lets a later stage act on what admission
    decided this round (OASiS scaling reads the schedule its admission committed).
    """
    budget: CpuBudget | None = None
    """The decision's CPU budget, if the caller set one (the service does; simulations don't)."""

    @property
    def now(self) -> float:
        return self.snapshot.now

    @property
    def capacity_gpus(self) -> int:
        return self.snapshot.training_gpus()

    def check_budget(self) -> None:
        """Raise :class:`BudgetExceeded` if the decision's CPU budget is spent.

        For policies whose one call loops over many jobs: call it once per job, so that
        a snapshot too big for the budget hands over to the fallback promptly. Cheap
        (one clock read); a no-op without a budget.
        """
        if self.budget is not None:
            self.budget.check()


class Ordering(Frozen, frozen=True):
    """An ordering of the schedulable jobs and how the engine should walk it."""

    job_ids: tuple[str, ...]
    preemptive: bool = False
    """Running jobs lower in the order may be preempted for higher ones."""
    backfill: bool = False
    """A job that does not fit lets later jobs start (else it blocks them)."""


class PlacementOutcome(Frozen, frozen=True):
    """Assignments for a job, or why it cannot be placed (an expected outcome, not a fault)."""

    assignments: tuple[Assignment, ...] = ()
    reason: str = ""
    details: dict[str, JsonValue] = msgspec.field(default_factory=dict)
    """The numbers behind the choice (a learned placement's predicted speed, its
    uncertainty, the price), shown as `details` in the decision's placement entry."""

    @property
    def placed(self) -> bool:
        return bool(self.assignments)


class PolicyInfo(Protocol):
    name: ClassVar[str]
    version: ClassVar[str]
    stage: ClassVar[Stage]
    summary: ClassVar[str]
    source: ClassVar[str]
    Params: ClassVar[type[BaseModel]]


@runtime_checkable
class AdmissionPolicy(PolicyInfo, Protocol):
    def admit(self, ctx: Context, jobs: Sequence[Job]) -> list[AdmissionResult]:
        """Judge each pending job not admitted before.

        Receives them in submission order. Must return exactly one result per
        job, in any order; a deferred job is asked again next round.
        """
        ...


@runtime_checkable
class OrderingPolicy(PolicyInfo, Protocol):
    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        """Order the schedulable jobs (running, suspended and admitted pending ones).

        Must return a permutation of their ids, most urgent first.
        """
        ...


@runtime_checkable
class ScalingPolicy(PolicyInfo, Protocol):
    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        """Choose workers (and parameter servers) for each job, given in service order.

        Must return one result per job. `workers` is 0 (not this round) or a
        count the job accepts (its bounds and step rule). The sum may exceed
        free capacity: the engine places in order and reports who waits.
        """
        ...


@runtime_checkable
class PlacementPolicy(PolicyInfo, Protocol):
    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        """Pick GPUs for `workers` workers of `job` among the free ones.

        Must use only free GPUs of nodes in `free`, whole workers per node, and
        either all `workers` or none (with a reason). Must not modify `free`.
        """
        ...


@runtime_checkable
class GatheringPlacement(Protocol):
    """A placement policy that may move a running job spread over several nodes onto one.

    A preemptive order resumes a job wherever there is room when it resumes: on a busy
    cluster, over several nodes, where a job whose gradients cross the network runs
    slower. Gathering it once a node has room is a migration (the job restarts from its
    checkpoint). The engine asks after every job of the order has been started or has
    waited, so a move only uses GPUs that nobody takes this round. It asks only for
    jobs whose GPUs one node of the cluster could hold.
    """

    @property
    def gathers(self) -> bool:
        """Whether this instance moves spread jobs at all (a parameter of the policy)."""
        ...

    def gather(self, ctx: Context, job: Job, free: FreeCapacity) -> PlacementOutcome:
        """GPUs for all of running `job`'s workers on one node, or no assignments (it
        stays where it is).

        `free` counts the job's own GPUs as free (a move may keep some of them). Must
        use only free GPUs, whole workers per node, exactly as many GPUs as the job holds,
        and must not modify `free`.
        """
        ...


@runtime_checkable
class ReclaimPolicy(PolicyInfo, Protocol):
    def reclaim(self, ctx: Context, request: ReclaimRequest) -> ReclaimResult:
        """Choose the loaned servers that go back to inference, and what that does to training.

        A separate call, not a stage of `decide`. May assume the snapshot is valid and
        that `request.node_ids`, when given, are distinct loaned nodes of it. Must return:
        - `servers`: exactly `request.node_ids` when given; else min(count, loaned)
          distinct loaned servers, with `shortfall` saying why when fewer are loaned
          than asked for (and None otherwise);
        - every running job with GPUs on a returned server once, in `shrink` or
          `preempt`, and no other job: in `shrink` with a count it accepts, below what it
          holds, and `assignments` keeping that many workers of its own GPUs, none on a
          returned server; in `preempt` only when no count it accepts fits on the GPUs
          it keeps;
        - `cost` = the number of preempted jobs, `preempted_gpus` the GPUs they held;
        - a reason for every returned server and every listed job.
        :mod:`policies.reclaim.impact` works all of this out for a chosen set of
        servers, so a policy's body is only its choice.
        """
        ...


@runtime_checkable
class DispatchPolicy(PolicyInfo, Protocol):
    def dispatch(self, view: DispatchView) -> DispatchChoice:
        """Choose which ready requests start their next layer now, where and in what order.

        A separate call (POST /v1/dispatch), not a stage of `decide`. May assume the
        snapshot is valid. Must return `starts` in start order, each naming a request of
        `view.ready` (not one whose layer is in flight) and an idle, online
        sub-accelerator whose style has a cost for that request's next layer; no request
        and no sub-accelerator twice. Every key of `reasons` must be a ready request.
        :func:`policies.dispatch.run.run_dispatch` checks all of this and explains
        every request of the snapshot.
        """
        ...


@runtime_checkable
class StatefulPolicy(Protocol):
    """A policy that writes state beyond the snapshot under `state_key` (DESIGN §5).

    Policies of one system share a key; exactly one of them writes it (a pipeline
    refuses two writers of one key), the others only read `ctx.state[state_key]`
    and declare `state_key` without `commit`.
    """

    state_key: ClassVar[str]

    def commit(self, ctx: Context, decision: Decision) -> StateValue:
        """The new state of `state_key` once `decision` is made; called once per round.

        Pure: computed from `ctx.state` (as loaded before the round), `ctx.snapshot`,
        `ctx.admission` and `decision` (all stages, after the engine's checks). The
        returned value replaces the old one whole: JSON data, or a Struct that encodes
        to it (it is stored as JSON; a Struct spares a round trip through JSON data, and
        a caller that keeps state in memory hands it back as is). It must reconcile with
        the snapshot, which wins where they disagree (a job gone from the snapshot has
        finished or left).
        """
        ...


@runtime_checkable
class FeedbackLearner(Protocol):
    """A policy whose state under `state_key` learns from observed outcomes between decisions
    (DESIGN §5: the dual agent's GP posterior fed by `POST /v1/feedback`).

    The service (on feedback) and the simulator (each round) call :meth:`learn` and keep
    what it returns as the cluster's state under `state_key`; the policy reads it back
    from `ctx.state` when it decides. A feedback learner need not write state in
    decisions (it has no `commit`), so it is not a :class:`StatefulPolicy` writer.
    """

    state_key: ClassVar[str]

    def learn(
        self, state: StateValue | None, observations: Sequence[ThroughputObservation]
    ) -> JsonValue:
        """The new state after `observations`, from the old one (None: none kept yet).

        Pure; unreadable old state is dropped, not an error. Observations of nodes or
        models the policy cannot use are ignored.
        """
        ...


@runtime_checkable
class LearnedPolicy(Protocol):
    """A policy whose answers come from a trained model (DESIGN §5).

    Its class names the key its model versions are stored under (`model_key`, the
    `policy` of a stored version) and is built as `cls(params, model)` by
    :meth:`policies.registry.Registry.create`, `model` being the version to use
    (a :class:`policies.learned.models.ModelBlob`), or None when none is active (the
    policy may then use the model it ships with). It must be built even when that
    model cannot be loaded, and then raise from its stage method, so that the
    profile's fallback answers and the decision says why. `model_version` names
    the weights in use; decisions show it after the policy's version (`1+v3`).
    """

    model_key: ClassVar[str]

    @property
    def model_version(self) -> str: ...


def policy_settles(policy: object) -> bool:
    """Whether a policy (class or instance) declares `settles = True`.

    Such a policy changes nothing when it is asked again after its own decision was
    carried out and nothing happened since (no arrival, completion or change of the
    nodes): what it reads moves only with such events, never with the clock alone
    (not the time, a running job's progress or attained service, the inference
    load, the seed, nor state of its own), and it never undoes what it did. Per
    stage that means: an admission that admits every job; a non-preemptive
    ordering; a scaling whose count for a job depends on that job alone; a
    placement that places a job whenever there is room for it, so that a job it
    could not place finds no more room once others were placed. A pipeline of such
    policies (:attr:`policies.engine.Pipeline.settles`) keeps every job as it is
    and starts none when asked between events; nor does a job's arrival change
    anything but its admission while fewer GPUs are free than the job needs at its
    smallest. The simulator asks it on neither (:class:`simulator.core.Simulation`).
    Undeclared: False.
    """
    return getattr(policy, "settles", False) is True


def policy_gathers(policy: object) -> bool:
    """Whether a built policy moves running jobs spread over several nodes onto one
    (:class:`GatheringPlacement` with its `gathers` on). Such a pipeline may change a
    round's answer when GPUs free up even if no job waits."""
    return isinstance(policy, GatheringPlacement) and policy.gathers is True


def policy_fits_fullest(policy: object) -> bool:
    """Whether a placement policy (class or instance) declares `fits_fullest = True`.

    Such a policy places a job that fits by its GPUs alone and has room on one node
    exactly where :meth:`policies.capacity.FreeCapacity.fullest_fit` says: all its
    workers on the first node of the fewest free GPUs that hold them, on its lowest free
    GPUs, with no details. The engine then commits that fit itself, in one compiled call
    (:meth:`~policies.capacity.FreeCapacity.take_fullest_fit`), where no fault can hand
    placement over to a fallback, and until the decision's CPU budget is spent (checked
    before each such commit as before each call); it asks the policy for every other job.
    Most jobs a decision starts then need no call into the policy. Undeclared: False.
    """
    return getattr(policy, "fits_fullest", False) is True


def learned_model_key(policy: object) -> str | None:
    """The model key of a learned policy (class or instance), or None for any other."""
    key = getattr(policy, "model_key", None)
    return key if isinstance(key, str) else None


def state_key_of(policy: object) -> str | None:
    """The state key a policy reads or writes, or None for a stateless policy."""
    key = getattr(policy, "state_key", None)
    return key if isinstance(key, str) else None


class NoParams(BaseModel):
    """This policy takes no parameters."""

    model_config = {"extra": "forbid", "frozen": True}
