"""The engine: runs a profile's policies, admission → ordering → scaling → placement.

The API and the simulator both call :meth:`Pipeline.run` (or its stateless
shorthand :meth:`Pipeline.decide`); there is no other path to a decision. The
engine owns everything the stage contracts leave out: which jobs each stage
sees, walking the order to allocate GPUs (strict or with backfill, preemptive
or not), tenant quotas, and re-checking every policy's output, so an invalid
answer becomes a :class:`PolicyFault` (or a fallback to the profile's
heuristic) and never an invalid decision.

Policy state (DESIGN §5) goes in and out explicitly: `run` takes the state the
caller kept for the cluster, shows the pipeline's keys to the policies through
the context, and returns the writers' updates next to the decision. The engine
keeps nothing between calls.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from operator import attrgetter
from types import MappingProxyType
from typing import Generic, TypeVar

from pydantic import JsonValue

from policies.capacity import CapacityError, FreeCapacity, not_enough_room
from policies.common.wording import counted
from policies.decision import (
    ENGINE_STAGES,
    AdmissionEntry,
    AdmissionResult,
    Decision,
    Fallback,
    JobExplanation,
    JobNote,
    JobStatus,
    PlacementEntry,
    PolicyRef,
    ScalingResult,
    Stage,
    Verdict,
)
from policies.learned.models import ModelProvider
from policies.model import Assignment, Job, JobState, Snapshot
from policies.profiles import BUDGET_FALLBACK, PolicyChoice, Profile
from policies.protocols import (
    AdmissionPolicy,
    BudgetExceeded,
    Context,
    CpuBudget,
    Ordering,
    OrderingPolicy,
    PlacementOutcome,
    PlacementPolicy,
    PolicyInfo,
    ScalingPolicy,
    StatefulPolicy,
    StateValue,
    learned_model_key,
    policy_fits_fullest,
    policy_gathers,
    policy_settles,
    state_key_of,
)
from policies.registry import Registry

_PREREQUISITES: dict[Stage, tuple[Stage, ...]] = {
    Stage.ADMISSION: (Stage.ADMISSION,),
    Stage.ORDERING: (Stage.ADMISSION, Stage.ORDERING),
    Stage.SCALING: (Stage.ADMISSION, Stage.ORDERING, Stage.SCALING),
    Stage.PLACEMENT: ENGINE_STAGES,
}

T = TypeVar("T")
P = TypeVar("P")


class PolicyFault(RuntimeError):
    """A policy raised or returned something that breaks its stage contract."""

    def __init__(self, stage: Stage, policy: str, message: str) -> None:
        super().__init__(f"{stage.value} policy {policy!r}: {message}")
        self.stage = stage
        self.policy = policy


def stages_with_prerequisites(stages: Iterable[Stage]) -> tuple[Stage, ...]:
    wanted = {p for s in stages for p in _PREREQUISITES[s]}
    return tuple(s for s in ENGINE_STAGES if s in wanted)


@dataclass(frozen=True)
class Outcome:
    """A decision and the policy state it leaves behind."""

    decision: Decision
    state: dict[str, StateValue] = field(default_factory=dict)
    """New values of the keys written this round (only those); merge them into what you keep."""


@dataclass(frozen=True)
class Fallbacks:
    """The heuristics that answer stages whose policy cannot (each stage at most once)."""

    admission: AdmissionPolicy | None = None
    ordering: OrderingPolicy | None = None
    scaling: ScalingPolicy | None = None
    placement: PlacementPolicy | None = None


@dataclass(frozen=True)
class Pipeline:
    """A profile with its policies built; reusable across decisions (policies are pure)."""

    profile: Profile
    admission: AdmissionPolicy
    ordering: OrderingPolicy
    scaling: ScalingPolicy
    placement: PlacementPolicy
    fallbacks: Fallbacks = field(default_factory=Fallbacks)
    budget_fallbacks: Fallbacks = field(default_factory=Fallbacks)
    """What answers a stage whose policy ran past the decision's CPU budget: the
    profile's fallback for the stage, else the stage's plainest heuristic
    (:data:`policies.profiles.BUDGET_FALLBACK`)."""

    def __post_init__(self) -> None:
        writers: dict[str, str] = {}
        for _, policy in self._writers:
            key = policy.state_key
            if key in writers:
                raise ValueError(
                    f"profile {self.profile.name!r}: policies {writers[key]!r} and "
                    f"{_name(policy)!r} both write state key {key!r}; one writer per key"
                )
            writers[key] = _name(policy)

    def _stage_policies(self) -> tuple[PolicyInfo, ...]:
        return (self.admission, self.ordering, self.scaling, self.placement)

    @cached_property
    def _writers(self) -> tuple[tuple[Stage, StatefulPolicy], ...]:
        # Once per pipeline: a runtime Protocol check walks the protocol's attributes
        # on every call, and `run` needs the writers every round.
        return tuple(
            (stage, p)
            for stage, p in zip(ENGINE_STAGES, self._stage_policies(), strict=True)
            if isinstance(p, StatefulPolicy)
        )

    @property
    def state_keys(self) -> tuple[str, ...]:
        """State keys this pipeline's policies read or write; empty for a stateless profile.

        A caller loads exactly these for the cluster before :meth:`run` (and need not
        touch its store at all when there are none).
        """
        keys: list[str] = []
        for policy in self._stage_policies():
            key = state_key_of(policy)
            if key is not None and key not in keys:
                keys.append(key)
        return tuple(keys)

    @cached_property
    def settles(self) -> bool:
        """Whether every policy that may answer a stage settles
        (:func:`policies.protocols.policy_settles`): asked again after its decision was
        carried out, with no event since, the pipeline changes nothing. Fallbacks
        count, since they answer when a stage's policy cannot."""
        fallbacks = (self.fallbacks, self.budget_fallbacks)
        candidates = [
            *self._stage_policies(),
            *(
                policy
                for chosen in fallbacks
                for policy in (chosen.admission, chosen.ordering, chosen.scaling, chosen.placement)
                if policy is not None
            ),
        ]
        return all(policy_settles(policy) for policy in candidates)

    @cached_property
    def gathers(self) -> bool:
        """Whether the placement (or its fallback) moves running jobs spread over several
        nodes onto one (:func:`policies.protocols.policy_gathers`): a completion that
        frees room for such a job is then worth a round even when no job waits."""
        backups = (self.fallbacks.placement, self.budget_fallbacks.placement)
        return any(policy_gathers(p) for p in (self.placement, *backups) if p is not None)

    @classmethod
    def build(
        cls, profile: Profile, registry: Registry, models: ModelProvider | None = None
    ) -> Pipeline:
        """The profile's policies, built; learned ones get their model version from `models`.

        Without `models`, learned policies use the models Arbiter ships. A model that
        cannot be loaded does not fail the build: the policy raises when asked, and
        the profile's fallback answers (see :class:`policies.protocols.LearnedPolicy`).
        """
        return cls(
            profile=profile,
            admission=registry.admission(profile.admission.name, profile.admission.params, models),
            ordering=registry.ordering(profile.ordering.name, profile.ordering.params, models),
            scaling=registry.scaling(profile.scaling.name, profile.scaling.params, models),
            placement=registry.placement(profile.placement.name, profile.placement.params, models),
            fallbacks=_fallbacks(profile.fallback, registry, models),
            budget_fallbacks=_fallbacks({**BUDGET_FALLBACK, **profile.fallback}, registry, models),
        )

    def policy_refs(self) -> dict[str, PolicyRef]:
        return {
            stage.value: _ref(policy)
            for stage, policy in zip(ENGINE_STAGES, self._stage_policies(), strict=True)
        }

    def run(
        self,
        snapshot: Snapshot,
        stages: Sequence[Stage] | None = None,
        *,
        state: Mapping[str, StateValue] | None = None,
        decision_id: str | None = None,
        seed: int = 0,
        cpu_budget_s: float | None = None,
        explain: bool = True,
    ) -> Outcome:
        """One decision for `snapshot`, with the policy state it reads and writes.

        `state` is what the caller kept for this cluster, by key (missing keys: never
        written); only :attr:`state_keys` are shown to the policies, read-only. The
        outcome's `state` holds the new value of every key a policy writes, computed
        after the decision; a caller that keeps one dict per cluster and merges
        `outcome.state` into it after each round (as the service and a simulator do)
        gives the policies exactly the history they need. The snapshot must already be
        semantically valid; it wins over the state where they disagree.

        With `cpu_budget_s`, a stage whose policy runs past that much CPU time (of this
        thread, counted from the start of the round) hands over to its budget fallback
        (:attr:`budget_fallbacks`) and the decision says so in `fallback`. Without it
        (the default, and what simulations use) nothing depends on the clock.

        With `explain=False` the decision carries no `explanations` and no `pending`
        notes: the reasons are for people, and a caller that only applies what the
        decision does (the simulator) skips the cost of wording one per job, about a
        tenth of a round. Everything else (admission, order, scaling, placement,
        preemptions, fallback, state) is the same as with explanations, which a test
        checks over every profile; the service always explains.
        """
        loaded = {k: state[k] for k in self.state_keys if state is not None and k in state}
        rnd = _Round(
            self,
            snapshot,
            stages_with_prerequisites(stages or ENGINE_STAGES),
            seed,
            MappingProxyType(loaded),
            budget=CpuBudget(cpu_budget_s) if cpu_budget_s is not None else None,
            explain=explain,
        )
        decision = rnd.run(decision_id or uuid.uuid4().hex)
        updates: dict[str, StateValue] = {}
        for stage, writer in self._writers:

            def commit(p: StatefulPolicy) -> StateValue:
                return p.commit(rnd.ctx, decision)

            # A faulty commit fails the round like any policy fault: better no answer
            # than a decision whose committed state silently went missing.
            updates[writer.state_key] = _guarded(stage, commit, writer)
        return Outcome(decision=decision, state=updates)

    def decide(
        self,
        snapshot: Snapshot,
        stages: Sequence[Stage] | None = None,
        *,
        decision_id: str | None = None,
        seed: int = 0,
        cpu_budget_s: float | None = None,
        explain: bool = True,
    ) -> Decision:
        """One decision for `snapshot` with no policy state: as :meth:`run` from nothing kept.

        The snapshot must already be semantically valid. Stateful policies see an empty
        state; nothing is committed (use :meth:`run` to keep state between rounds).
        """
        rnd = _Round(
            self,
            snapshot,
            stages_with_prerequisites(stages or ENGINE_STAGES),
            seed,
            MappingProxyType({}),
            budget=CpuBudget(cpu_budget_s) if cpu_budget_s is not None else None,
            explain=explain,
        )
        return rnd.run(decision_id or uuid.uuid4().hex)


class _Round:
    """The working state of one decision; discarded afterwards."""

    def __init__(
        self,
        pipeline: Pipeline,
        snapshot: Snapshot,
        stages: tuple[Stage, ...],
        seed: int,
        state: Mapping[str, StateValue],
        *,
        budget: CpuBudget | None = None,
        explain: bool = True,
    ) -> None:
        self.pipeline = pipeline
        self.explain = explain
        self.snapshot = snapshot
        self.stages = stages
        held: dict[str, int] = {}
        # GPUs each running job holds, summed once: the allocation reads them many times.
        self.held_gpus: dict[str, int] = {}
        running = JobState.RUNNING
        held_gpus = self.held_gpus
        for job in snapshot.jobs:
            if job.state is running:
                # `Job.placed_gpus`, inlined: this runs for every running job of every round.
                placement = job.placement
                if len(placement) == 1:
                    gpus = len(placement[0].gpu_indices)
                else:
                    gpus = sum(len(a.gpu_indices) for a in placement)
                held_gpus[job.id] = gpus
                held[job.tenant] = held.get(job.tenant, 0) + gpus
        self.budget = budget
        self.spent: BudgetExceeded | None = None
        self.spent_in = Stage.ADMISSION  # where the budget ran out, once it has
        self.ctx = Context(
            snapshot=snapshot, seed=seed, gpus_by_tenant=held, state=state, budget=budget
        )
        self.explanations: dict[str, JobExplanation] = {}
        self.fallback: Fallback | None = None
        self.refs = pipeline.policy_refs()
        backups, cheap = pipeline.fallbacks, pipeline.budget_fallbacks
        self.admission = _Slot(
            Stage.ADMISSION, pipeline.admission, backups.admission, cheap.admission
        )
        self.ordering = _Slot(Stage.ORDERING, pipeline.ordering, backups.ordering, cheap.ordering)
        self.scaling = _Slot(Stage.SCALING, pipeline.scaling, backups.scaling, cheap.scaling)
        self.placement = _Slot(
            Stage.PLACEMENT, pipeline.placement, backups.placement, cheap.placement
        )

    # -- fault handling -------------------------------------------------------------------------
    def call(self, slot: _Slot[P], call: Callable[[P], T]) -> T:
        """Run a stage's policy; on a fault, use the profile's fallback for the stage if any.

        Once a stage has fallen back, the fallback answers the rest of that stage's calls
        in this decision (placement calls its policy once per job). Several stages may
        fall back in one decision (a learned system spanning stages loses one model for
        all of them): `fallback` then names each heuristic and each reason, in stage
        order. A fault of a fallback itself fails the decision. Once the CPU budget is
        spent, every stage from then on hands over to its budget fallback.
        """
        if self.budget is not None and slot.budget_backup is not None:
            self.check_budget(slot)  # before the call: a placement call takes GPUs
            if self.spent is not None:
                self._hand_over(slot)
        try:
            # `_guarded`, inlined: placement runs this for every job it starts.
            try:
                return call(slot.policy)
            except (PolicyFault, BudgetExceeded):
                raise
            except Exception as exc:
                raise _raised(slot.stage, slot.policy, exc) from exc
        except BudgetExceeded as spent:  # from the policy itself (`Context.check_budget`)
            self.spent, self.spent_in = spent, slot.stage
            self._hand_over(slot)
            return _guarded(slot.stage, call, slot.policy)
        except PolicyFault as error:
            backup = slot.backup
            if backup is None:
                raise
            earlier = self.fallback
            self.fallback = (
                Fallback(policy=_name(backup), reason=str(error))
                if earlier is None
                else Fallback(
                    policy=f"{earlier.policy}, {_name(backup)}",
                    reason=f"{earlier.reason}; {error}",
                )
            )
            self.refs[slot.stage.value] = _ref(backup)
            slot.policy, slot.backup = backup, None
            return _guarded(slot.stage, call, backup)

    def check_budget(self, slot: _Slot[P]) -> None:
        """Before a call of `slot`'s policy: note that the CPU budget is spent, once it is
        (the call, or what stands in for it, then hands over)."""
        budget = self.budget
        if budget is not None and slot.budget_backup is not None and self.spent is None:
            try:
                budget.check()
            except BudgetExceeded as spent:
                self.spent, self.spent_in = spent, slot.stage

    def _hand_over(self, slot: _Slot[P]) -> None:
        """The budget is spent: this stage's budget fallback answers its calls from now on.

        A stage whose policy is already that heuristic goes on as it is. The decision's
        `fallback` names every heuristic that took over, and why the first did.
        """
        backup, slot.budget_backup = slot.budget_backup, None
        if backup is None or type(backup) is type(slot.policy):
            return
        spent = self.spent
        assert spent is not None
        took_over = f"{_name(backup)!r} took over from {_name(slot.policy)!r}"
        first = self.fallback
        if first is None:
            self.fallback = Fallback(
                policy=_name(backup),
                reason=(
                    f"the decision's CPU budget of {spent.limit_s * 1000:g} ms ran out in "
                    f"{self.spent_in.value} ({spent.used_s * 1000:.0f} ms used); {took_over}"
                ),
            )
        else:
            self.fallback = Fallback(
                policy=f"{first.policy}, {_name(backup)}",
                reason=f"{first.reason}; then {took_over} in {slot.stage.value}",
            )
        self.refs[slot.stage.value] = _ref(backup)
        slot.policy, slot.backup = backup, None

    def _explain(self, job_id: str, status: JobStatus, reason: str) -> None:
        if self.explain:
            self.explanations[job_id] = JobExplanation(job_id=job_id, status=status, reason=reason)

    # -- stages -----------------------------------------------------------------------------------
    def run(self, decision_id: str) -> Decision:
        jobs = self.snapshot.jobs
        # Enum members bound once: these comprehensions visit every job of every round.
        pending_state = JobState.PENDING
        to_judge = sorted(
            (j for j in jobs if j.state is pending_state and not j.admitted),
            key=_submit_time,
        )
        verdicts = self._admission(to_judge)
        # `AdmissionResult.admitted` read as the comparison it makes, without a property
        # call per judged job (hundreds a round on a large snapshot).
        admit = Verdict.ADMIT
        admission = tuple(
            AdmissionEntry(
                job_id=r.job_id,
                admitted=r.verdict is admit,
                verdict=r.verdict,
                reason=r.reason,
                details=r.details,
            )
            for r in verdicts
        )
        verdict_of = {r.job_id: r for r in verdicts}
        # Later stages may act on this round's verdicts (and the numbers behind them).
        self.ctx = replace(self.ctx, admission=MappingProxyType(verdict_of))
        schedulable = [
            j
            for j in jobs
            if j.state is not pending_state or j.admitted or verdict_of[j.id].verdict is admit
        ]
        for r in verdicts:
            if r.verdict is Verdict.REJECT:
                self._explain(r.job_id, JobStatus.REJECTED, r.reason)
            elif r.verdict is Verdict.DEFER:
                self._explain(r.job_id, JobStatus.PENDING, f"admission deferred: {r.reason}")

        ordered: list[Job] = []
        ordering = Ordering(job_ids=())
        if Stage.ORDERING in self.stages:
            ordering = self._ordering(schedulable)
            # Each id's job by its position, which the snapshot's check (or the ordering's
            # tie-break) has already worked out: no map of every job by id is built.
            at, position = self.snapshot.jobs, self.snapshot.job_positions
            ordered = [at[position[i]] for i in ordering.job_ids]
        scaling: list[ScalingResult] = []
        if Stage.SCALING in self.stages:
            scaling = self._scaling(ordered)
        placement: tuple[PlacementEntry, ...] = ()
        preempted: tuple[JobNote, ...] = ()
        pending: tuple[JobNote, ...] = ()
        if Stage.PLACEMENT in self.stages:
            placement, preempted, pending = _Allocation(self, ordering, ordered, scaling).run()
        else:
            for job in schedulable:
                if job.id not in self.explanations:
                    status = (
                        JobStatus.RUNNING if job.state is JobState.RUNNING else JobStatus.PENDING
                    )
                    self._explain(job.id, status, "placement not requested in this decision")
        deferred = (
            tuple(
                JobNote(job_id=r.job_id, reason=f"admission deferred: {r.reason}")
                for r in verdicts
                if r.verdict is Verdict.DEFER
            )
            if self.explain
            else ()
        )
        explained = self.explanations
        return Decision(
            decision_id=decision_id,
            cluster_id=self.snapshot.cluster_id,
            now=self.snapshot.now,
            profile=self.pipeline.profile.name,
            stages=self.stages,
            policies=self.refs,
            admission=admission,
            ordering=ordering.job_ids,
            scaling=tuple(scaling),
            placement=placement,
            preemptions=preempted,
            pending=pending + deferred,
            explanations=(
                # Every job explained (the usual case): looked up without a Python loop.
                tuple(map(explained.__getitem__, map(_job_id, jobs)))
                if len(explained) == len(jobs)
                else tuple(explained[i] for i in map(_job_id, jobs) if i in explained)
                if explained
                else ()  # none asked for (`explain=False`)
            ),
            fallback=self.fallback,
        )

    def _admission(self, jobs: list[Job]) -> list[AdmissionResult]:
        in_order = False

        def call(p: AdmissionPolicy) -> list[AdmissionResult]:
            nonlocal in_order
            results = list(p.admit(self.ctx, jobs))
            in_order = _check_one_each(Stage.ADMISSION, p, [r.job_id for r in results], jobs)
            return results

        results = self.call(self.admission, call)
        if in_order:
            return results  # already in submission order, as most policies answer
        order = {j.id: i for i, j in enumerate(jobs)}
        return sorted(results, key=lambda r: order[r.job_id])

    def _ordering(self, jobs: list[Job]) -> Ordering:
        def call(p: OrderingPolicy) -> Ordering:
            result = p.order(self.ctx, jobs)
            _check_one_each(Stage.ORDERING, p, list(result.job_ids), jobs)
            return result

        return self.call(self.ordering, call)

    def _scaling(self, jobs: list[Job]) -> list[ScalingResult]:
        in_order = False

        def call(p: ScalingPolicy) -> list[ScalingResult]:
            nonlocal in_order
            results = list(p.scale(self.ctx, jobs))
            in_order = _check_one_each(Stage.SCALING, p, [r.job_id for r in results], jobs)
            # Each result beside its job: paired in order when the answer is in service
            # order (as most policies answer), else looked up.
            pairs = (
                zip(results, jobs, strict=True)
                if in_order
                else ((r, self.snapshot.jobs_by_id[r.job_id]) for r in results)
            )
            for r, job in pairs:
                # The requested count is always accepted (the snapshot's bounds hold it).
                workers = r.workers
                if workers and workers != job.workers and not job.accepts_workers(workers):
                    raise PolicyFault(
                        Stage.SCALING,
                        _name(p),
                        f"{counted(workers, 'worker')} for job {job.id!r} breaks its bounds "
                        f"[{job.lo}, {job.hi}] or step rule {job.scaling_rule.value}",
                    )
            return results

        results = self.call(self.scaling, call)
        if in_order:
            return results
        order = {j.id: i for i, j in enumerate(jobs)}
        return sorted(results, key=lambda r: order[r.job_id])


class _Allocation:
    """Walks the service order and turns worker counts into GPUs."""

    def __init__(
        self, rnd: _Round, ordering: Ordering, ordered: list[Job], scaling: list[ScalingResult]
    ) -> None:
        self.rnd = rnd
        self.snapshot = rnd.snapshot
        self.ordering = ordering
        self.ordered = ordered
        self.target = {r.job_id: r for r in scaling}
        self.free = FreeCapacity.for_training(self.snapshot)
        # GPUs each tenant holds as the walk goes. Read only against a quota, so the
        # running jobs are counted in only when some tenant has one (see `run`).
        self.tenant_gpus: dict[str, int] = {}
        self.placement: dict[str, tuple[Assignment, ...]] = {}
        self.preempted: dict[str, str] = {}
        self.outranked: set[str] = set()  # preempted by the order, not by a lost node or scaling
        self.pending: dict[str, str] = {}
        self.selected: set[str] | None = None  # the run set of a preemptive ordering
        self.grown_tenants: set[str] = set()  # tenants with a job started or grown this round
        self.details: dict[str, dict[str, JsonValue]] = {}  # the placement policy's numbers
        self.moved: dict[str, int] = {}  # running jobs gathered onto one node: nodes before
        # Tenants' GPU quotas, looked up once: the walk asks for every job it starts.
        self.quotas = {t.id: t.gpu_quota for t in self.snapshot.tenants if t.gpu_quota is not None}
        # The placement policy puts a job that fits one node by its GPUs alone on the
        # capacity's best fit, and no fault can hand placement over to a fallback: the
        # walk commits that fit itself (`_start`) while the CPU budget lasts.
        slot = rnd.placement
        self.fits_fullest = slot.backup is None and policy_fits_fullest(slot.policy)

    def _quota_left(self, tenant: str) -> int | None:
        quota = self.quotas.get(tenant)
        if quota is None:
            return None
        return quota - self.tenant_gpus.get(tenant, 0)

    def _hold(self, job: Job, assignments: tuple[Assignment, ...], gpus: int) -> None:
        """`job` holds `assignments`, `gpus` GPUs in all (the caller has counted them)."""
        self.placement[job.id] = assignments
        self.tenant_gpus[job.tenant] = self.tenant_gpus.get(job.tenant, 0) + gpus

    def _wait(self, job: Job, reason: str) -> None:
        """`job` stays pending for `reason`.

        A job no node of this cluster could ever hold says so instead, whatever else
        keeps it waiting (it still blocks a strict order: the cluster may grow). Asked
        only here, for the jobs that wait: the answer depends on the nodes alone.
        """
        self.pending[job.id] = self.free.never_fits(job) or reason

    def run(self) -> tuple[tuple[PlacementEntry, ...], tuple[JobNote, ...], tuple[JobNote, ...]]:
        running_state = JobState.RUNNING
        running = [j for j in self.ordered if j.state is running_state]
        keep = self._running_to_keep(running)
        kept = running if len(keep) == len(running) else [j for j in running if j.id in keep]
        self.free.take_held([(job, job.placement) for job in kept])
        # What _hold does, for jobs whose GPUs were just counted: every decision holds
        # every running job, so this runs for most of the snapshot. Nothing is placed
        # yet, and the tenants' tallies are read only against a quota: without quotas
        # (the common case) they are not kept.
        held = self.rnd.held_gpus
        self.placement = {job.id: job.placement for job in kept}
        if self.quotas:
            tenant_gpus = self.tenant_gpus
            for job in kept:
                tenant_gpus[job.tenant] = tenant_gpus.get(job.tenant, 0) + held[job.id]
        targets, outside = self.target, self.preempted
        selected, waiting, never_fits = self.selected, self.pending, self.free.never_fits
        explain = self.rnd.explain
        blocked_by: str | None = None
        behind: str | None = None  # why the jobs behind the blocker wait, once worded
        for job in self.ordered:
            job_id = job.id
            if job_id in keep:
                target = targets.get(job_id)
                if target is not None and target.workers * job.gpus_per_worker != held[job_id]:
                    self._resize(job)
                continue
            if job_id in outside:
                continue
            if blocked_by is not None or (selected is not None and job_id not in selected):
                if not explain:
                    # Behind a strict order's blocker, or outside a preemptive order's run
                    # set, a job that holds nothing only waits, and only its pending note
                    # says why: a decision without explanations (the simulator's) skips the
                    # note's work for the hundred or more jobs that wait so each round.
                    continue
                # With workers, it waits for a reason worded once per decision (the blocker
                # stays the blocker for the rest of the walk), answered here without a
                # call per job: on a busy cluster thousands of jobs wait so every round.
                target = targets.get(job_id)
                if (target.workers if target is not None else job.workers) != 0:
                    if blocked_by is None:
                        reason = self._outside_run_set
                    else:
                        if behind is None:
                            behind = (
                                f"waiting behind job {blocked_by!r} (strict order, no backfill)"
                            )
                        reason = behind
                    waiting[job_id] = never_fits(job) or reason
                    continue
            blocked_by = self._start(job, blocked_by)
        self._restore_needless_preemptions(running)
        if self.rnd.pipeline.gathers:
            self._gather_spread(running)
        placement = self._entries()
        if self.rnd.explain:
            self._explain_all()
        preempted = tuple(JobNote(job_id=i, reason=r) for i, r in self.preempted.items())
        pending = (
            tuple(JobNote(job_id=i, reason=r) for i, r in self.pending.items())
            if self.rnd.explain
            else ()
        )
        return placement, preempted, pending

    def _running_to_keep(self, running: list[Job]) -> set[str]:
        """Running jobs that keep their GPUs; the others are preempted (with a reason)."""
        keep: set[str] = set()
        targets = self.target
        # A valid snapshot places jobs only on its own nodes: when training may use all of
        # them, no running job can have lost one, and the per-job look is skipped.
        usable = set(self.free.node_ids())
        may_lose = len(usable) != len(self.snapshot.nodes)
        for job in running:
            job_id = job.id
            lost = None
            if may_lose:
                for a in job.placement:
                    if a.node_id not in usable:
                        lost = a.node_id
                        break
            target = targets.get(job_id)
            if lost is not None:
                self.preempted[job_id] = (
                    f"node {lost!r} is unhealthy or no longer available to training"
                )
            elif target is not None and target.workers == 0:
                self.preempted[job_id] = (
                    f"scaling gave it no workers: {target.reason or 'no reason given'}"
                )
            else:
                keep.add(job_id)
        if not self.ordering.preemptive:
            return keep
        # Preemptive orderings: walk the order with the cluster's GPU budget; running
        # jobs that fall outside it make room for more urgent ones.
        budget = self.free.total_free
        tenant_budget: dict[str, int] = {}
        must_run = [j for j in running if j.id in keep and not j.preemptible]
        selected = {j.id for j in must_run}
        held = self.rnd.held_gpus
        budget -= sum(held[j.id] for j in must_run)
        for job in must_run:
            # Their GPUs count against their tenant's quota like any selected job's.
            tenant_budget[job.tenant] = tenant_budget.get(job.tenant, 0) + held[job.id]
        quotas = self.quotas
        preempted = self.preempted
        backfill = self.ordering.backfill
        running_state = JobState.RUNNING
        # This walk covers every job of the order, the waiting ones included, each round:
        # without quotas (the common case) the tenants' tallies are not needed.
        for job in self.ordered:
            job_id = job.id
            if job_id in selected or job_id in preempted:
                continue
            target = targets.get(job_id)
            workers = target.workers if target is not None else job.workers
            if workers == 0:
                continue
            need = held[job_id] if job.state is running_state else workers * job.gpus_per_worker
            quota = quotas.get(job.tenant) if quotas else None
            if quota is not None:
                # Only tenants with a quota need their tally.
                used = tenant_budget.get(job.tenant, 0)
                if used + need > quota:
                    continue
                if need <= budget:
                    tenant_budget[job.tenant] = used + need
            if need <= budget:
                selected.add(job_id)
                budget -= need
                if budget <= 0:
                    # Every job of a valid snapshot needs a GPU at least (a worker has
                    # one or more; a running job holds some): nothing further fits.
                    break
            elif not backfill:
                break
        self.selected = selected
        outside = keep - selected
        if not outside:
            return keep
        # Counted only when a running job falls outside the run set (its reason says how
        # many selected jobs come before it). One walk of the order both counts and
        # preempts: `running` is in the order's order, so the preemptions are noted in it.
        order = self.rnd.pipeline.ordering.name
        outranked = self.outranked
        count = 0
        for job in self.ordered:
            job_id = job.id
            if job_id in selected:
                count += 1
            elif job_id in outside:
                keep.discard(job_id)
                preempted[job_id] = (
                    f"preempted for higher-priority jobs ({count} ahead in {order} order)"
                )
                outranked.add(job_id)
        return keep

    def _restore_needless_preemptions(self, running: list[Job]) -> None:
        """Undo a preemption whose GPUs nobody took after all (fragmentation, quotas).

        Not when a job started or grown this round left the tenant no quota for it, nor
        when others took the node's CPUs or memory: then the preemption was needed.
        """
        free = self.free
        all_free = free.all_free
        held_gpus = self.rnd.held_gpus
        for job in running:
            if job.id not in self.outranked:
                continue
            held = held_gpus[job.id]
            # Its GPUs cannot all be free when fewer are free in all (on a busy cluster,
            # none are): no look at its nodes then.
            if held > free.total_free:
                continue
            if not all(all_free(a.node_id, a.gpu_indices) for a in job.placement):
                continue
            quota = self._quota_left(job.tenant)
            if job.tenant in self.grown_tenants and quota is not None and held > quota:
                continue
            try:
                self.free.take(job, job.placement)
            except CapacityError:
                continue
            self._hold(job, job.placement, held)
            del self.preempted[job.id]
            self.outranked.discard(job.id)

    def _gather_spread(self, running: list[Job]) -> None:
        """Move running jobs spread over several nodes onto one, in service order, where
        the placement policy finds room (:class:`GatheringPlacement`).

        After every start and wait of the round: a move takes only GPUs nobody else was
        given, and the GPUs it leaves are free for the next round's jobs.
        """
        placement, held, largest = self.placement, self.rnd.held_gpus, self.free.max_gpus_per_node
        spread = [
            job
            for job in running
            if len(job.placement) > 1
            and placement.get(job.id) is job.placement
            and held[job.id] <= largest
        ]  # spread, one node could hold it, and neither preempted nor resized this round
        free = self.free
        while spread:
            # A move frees GPUs that a job earlier in the order may now gather onto:
            # passes repeat until one moves nothing, so that asking again changes nothing.
            staying = []
            buckets = free.nodes_by_free()
            for job in spread:
                need = held[job.id]
                if not any(buckets[need:]) and not any(
                    free.free_count(a.node_id) + len(a.gpu_indices) >= need for a in job.placement
                ):
                    # No node has that many GPUs free, counting the job's own: nothing to
                    # ask (on a busy cluster, the answer for most rounds a job stays spread).
                    staying.append(job)
                    continue
                outcome = self.rnd.call(self.rnd.placement, partial(self._call_gather, job))
                if not outcome.assignments:
                    staying.append(job)
                    continue
                placement[job.id] = outcome.assignments
                self.moved[job.id] = len(job.placement)
                if outcome.details:
                    self.details[job.id] = outcome.details
            if len(staying) == len(spread):
                break
            spread = staying

    def _call_gather(self, job: Job, p: PlacementPolicy) -> PlacementOutcome:
        """The gather call of :meth:`_gather_spread`: the job's GPUs are free while the
        policy looks, and it holds either the new GPUs or its own afterwards."""
        # Not `isinstance` against the runtime protocol, which walks its members on every
        # call: the engine asks for every spread job of every round.
        gather = getattr(p, "gather", None)
        if gather is None or getattr(p, "gathers", False) is not True:
            return PlacementOutcome()  # a fallback that does not gather
        free = self.free
        held = job.placement
        free.release(job, held)
        try:
            outcome: PlacementOutcome = gather(self.rnd.ctx, job, free)
            assignments = outcome.assignments
            if assignments:
                placed = sum(len(a.gpu_indices) for a in assignments)
                if placed != self.rnd.held_gpus[job.id] or len(assignments) != 1:
                    raise PolicyFault(
                        Stage.PLACEMENT,
                        _name(p),
                        f"gathered job {job.id!r} as {counted(placed, 'GPU')} on "
                        f"{counted(len(assignments), 'node')}; it holds "
                        f"{self.rnd.held_gpus[job.id]} on {len(held)}",
                    )
                try:
                    free.take(job, assignments)
                except CapacityError as error:
                    raise PolicyFault(Stage.PLACEMENT, _name(p), str(error)) from error
                return outcome
        except BaseException:
            free.take_held([(job, held)])  # counted back as held, as the walk began
            raise
        free.take_held([(job, held)])
        return PlacementOutcome()

    def _resize(self, job: Job) -> None:
        target = self.target.get(job.id)
        have = self.rnd.held_gpus[job.id] // job.gpus_per_worker
        if target is None or target.workers == have:
            return
        if target.workers < have:
            kept = _shrink(job, job.placement, target.workers)
            removed = _difference(job.placement, kept)
            self.free.release(job, removed)
            self.placement[job.id] = kept
            if self.quotas:
                self.tenant_gpus[job.tenant] -= (have - target.workers) * job.gpus_per_worker
            return
        extra = target.workers - have
        quota = self._quota_left(job.tenant)
        if quota is not None and extra * job.gpus_per_worker > quota:
            return
        outcome = self._place(job, extra)
        if outcome.placed:
            self.grown_tenants.add(job.tenant)
            self.placement[job.id] = _merge(job.placement, outcome.assignments)
            self.tenant_gpus[job.tenant] = (
                self.tenant_gpus.get(job.tenant, 0) + extra * job.gpus_per_worker
            )

    @cached_property
    def _outside_run_set(self) -> str:
        """Why a job outside a preemptive order's run set waits: the same for all of them."""
        return (
            "outside the run set: more urgent jobs fill the cluster's GPUs "
            f"({self.rnd.pipeline.ordering.name} order)"
        )

    def _start(self, job: Job, blocked_by: str | None) -> str | None:
        """Try to start a job that holds no GPUs; return who blocks later jobs.

        A job with workers that waits behind a strict order's blocker, or outside a
        preemptive order's run set, is answered by the walk itself (:meth:`run`): one
        that reaches here with workers is neither.
        """
        target = self.target.get(job.id)
        workers = target.workers if target is not None else job.workers
        if workers == 0:
            reason = (
                target.reason if target is not None and target.reason else "no workers assigned"
            )
            self._wait(job, f"scaling: {reason}")
            return blocked_by
        gpw = job.gpus_per_worker
        quota = self.quotas.get(job.tenant) if self.quotas else None
        if quota is not None:
            need = workers * gpw
            left = quota - self.tenant_gpus.get(job.tenant, 0)
            if need > left:
                self._wait(
                    job,
                    f"tenant {job.tenant!r} quota: needs {counted(need, 'GPU')}, "
                    f"{max(left, 0)} left of its quota",
                )
                return blocked_by
        counts: Sequence[int] = (workers,)
        if not job.gang and workers > job.lo:
            # Smaller counts to fall back on, largest first; none below the job's minimum
            # (every accepted count is at least that), so most jobs list none.
            counts = [workers, *(w for w in reversed(job.allowed_worker_counts()) if w < workers)]
        free = self.free
        reason = ""
        for count in counts:
            need = count * gpw
            if need > free.total_free:
                reason = f"needs {counted(need, 'GPU')}, {free.total_free} free"
                continue
            room = free.room_at_most(job)
            if room < count:
                reason = not_enough_room(job, count, room)
                continue
            # What the policy would answer and `_call_placement` commit, in one compiled
            # call, where the policy declares it (see `fits_fullest`) and its budget is not
            # spent (checked as before a call of it); None: ask it.
            fit = None
            if self.fits_fullest:
                rnd = self.rnd
                if rnd.budget is not None:
                    rnd.check_budget(rnd.placement)
                if rnd.spent is None:
                    fit = free.take_fullest_fit(job, need)
            if fit is None:
                outcome = self._place(job, count)
                assignments = outcome.assignments
            else:
                assignments = fit
            if assignments:
                # `_hold`, inlined: this runs for every job the walk starts.
                tenant = job.tenant
                self.grown_tenants.add(tenant)
                self.placement[job.id] = assignments
                tenant_gpus = self.tenant_gpus
                tenant_gpus[tenant] = tenant_gpus.get(tenant, 0) + need
                return blocked_by
            reason = outcome.reason or "placement found no fit"
        self._wait(job, reason)
        return None if self.ordering.backfill else job.id

    def _place(self, job: Job, workers: int) -> PlacementOutcome:
        """Ask the placement policy for `workers` workers of `job`; commit what it returns.

        Runs for every job the walk starts. Through `_Round.call` (a budget or a
        fallback in play), the call is a `partial` of a method, not a closure defined
        per job (which would allocate a function and its cells), and it is not kept on
        self (kept, it would tie the allocation into a reference cycle, and every
        round's working state would wait for the cyclic collector).
        """
        rnd = self.rnd
        slot = rnd.placement
        if rnd.budget is None and slot.backup is None:
            # What `_Round.call` does when no budget can run out and no fallback can take
            # over (most profiles): a fault fails the decision. Written out, with no
            # bound call built per job, as the walk asks this for every job it starts.
            policy = slot.policy
            try:
                return self._call_placement(job, workers, policy)
            except PolicyFault:
                raise
            except Exception as exc:
                raise _raised(Stage.PLACEMENT, policy, exc) from exc
        return rnd.call(slot, partial(self._call_placement, job, workers))

    def _call_placement(self, job: Job, workers: int, p: PlacementPolicy) -> PlacementOutcome:
        """The placement call of :meth:`_place`: the common answer (one node) is counted
        without a generator, and the capacity re-checks every GPU before taking it."""
        free = self.free
        expected = workers * job.gpus_per_worker
        outcome = p.place(self.rnd.ctx, job, workers, free)
        assignments = outcome.assignments
        if assignments:
            if len(assignments) == 1:
                placed = len(assignments[0].gpu_indices)
            else:
                placed = sum(len(a.gpu_indices) for a in assignments)
            if placed != expected:
                raise PolicyFault(
                    Stage.PLACEMENT,
                    _name(p),
                    f"placed {counted(placed, 'GPU')} for job {job.id!r}, expected {expected}",
                )
            try:
                free.take(job, assignments)
            except CapacityError as error:
                raise PolicyFault(Stage.PLACEMENT, _name(p), str(error)) from error
            if outcome.details:
                self.details[job.id] = outcome.details
        return outcome

    def _explain_all(self) -> None:
        """Explain every job of the order (not asked for by :meth:`Pipeline.run`'s
        `explain=False`). It visits every job of every round, running ones included."""
        explanations = self.rnd.explanations
        held = self.rnd.held_gpus
        preempted, pending, placement = self.preempted, self.pending, self.placement
        moved = self.moved
        # Most jobs share a handful of reasons ("keeps running: 1 GPUs on 1 node"):
        # formatted once per decision, not once per job.
        wheres: dict[tuple[int, int], str] = {}
        keeps: dict[int | tuple[int, int], str] = {}
        starts: dict[int | tuple[int, int], str] = {}
        running_state = JobState.RUNNING
        was_preempted, is_pending, keeps_running = (
            JobStatus.PREEMPTED,
            JobStatus.PENDING,
            JobStatus.RUNNING,
        )
        for job in self.ordered:
            job_id = job.id
            assignments = placement.get(job_id)
            if job_id in preempted:
                status, reason = was_preempted, preempted[job_id]
            elif job_id in pending:
                status, reason = is_pending, pending[job_id]
            elif assignments is not None:
                nodes = len(assignments)
                if nodes == 1:
                    gpus = len(assignments[0].gpu_indices)
                else:
                    gpus = sum(len(a.gpu_indices) for a in assignments)
                # One node (most jobs): keyed by the GPU count alone, no tuple per job.
                key = gpus if nodes == 1 else (gpus, nodes)
                if job.state is running_state and gpus == held[job_id]:
                    if moved and job_id in moved:
                        status, reason = (
                            JobStatus.MOVED,
                            f"moved onto {_where(wheres, gpus, nodes)} from {moved[job_id]} "
                            "nodes (a restart from its checkpoint)",
                        )
                    else:
                        status = keeps_running
                        found = keeps.get(key)
                        if found is None:
                            found = f"keeps running: {_where(wheres, gpus, nodes)}"
                            keeps[key] = found
                        reason = found
                elif job.state is not running_state:
                    status = JobStatus.STARTED
                    found = starts.get(key)
                    if found is None:
                        found = f"started: {_where(wheres, gpus, nodes)}"
                        starts[key] = found
                    reason = found
                else:
                    status, reason = (
                        JobStatus.RESIZED,
                        f"resized from {held[job_id]} to {_where(wheres, gpus, nodes)}",
                    )
            else:
                continue
            explanations[job_id] = JobExplanation(job_id=job_id, status=status, reason=reason)

    def _entries(self) -> tuple[PlacementEntry, ...]:
        """Every job that runs after the decision, in the order's order."""
        placement, details = self.placement, self.details
        if not details:
            # No placement gave details (most decisions): one comprehension over the order.
            get = placement.get
            return tuple(
                [
                    PlacementEntry(job_id=job.id, assignments=assignments)
                    for job in self.ordered
                    if (assignments := get(job.id)) is not None
                ]
            )
        entries: list[PlacementEntry] = []
        for job in self.ordered:
            job_id = job.id
            assignments = placement.get(job_id)
            if assignments is not None:
                extra = details.get(job_id)
                entries.append(
                    PlacementEntry(job_id=job_id, assignments=assignments)
                    if extra is None
                    else PlacementEntry(job_id=job_id, assignments=assignments, details=extra)
                )
        return tuple(entries)


def _where(known: dict[tuple[int, int], str], gpus: int, nodes: int) -> str:
    """ "3 GPUs on 2 nodes", formatted once per decision for each count."""
    where = known.get((gpus, nodes))
    if where is None:
        where = f"{counted(gpus, 'GPU')} on {nodes} node{'s' if nodes > 1 else ''}"
        known[(gpus, nodes)] = where
    return where


_job_id = attrgetter("id")
_submit_time = attrgetter("submit_time")


def _name(policy: object) -> str:
    return str(getattr(policy, "name", type(policy).__name__))


def _ref(policy: object) -> PolicyRef:
    """Name and version; a learned policy's version also names its model (`1+shipped-…`)."""
    version = str(getattr(policy, "version", "?"))
    if learned_model_key(policy) is not None:
        version = f"{version}+{getattr(policy, 'model_version', '?')}"
    return PolicyRef(name=_name(policy), version=version)


class _Slot(Generic[P]):
    """A stage's policy during one decision, and the fallback that may replace it."""

    __slots__ = ("backup", "budget_backup", "policy", "stage")

    def __init__(self, stage: Stage, policy: P, backup: P | None, budget_backup: P | None) -> None:
        self.stage = stage
        self.policy = policy
        self.backup = backup
        self.budget_backup = budget_backup


def _fallbacks(
    chosen: Mapping[Stage, PolicyChoice], registry: Registry, models: ModelProvider | None
) -> Fallbacks:
    admission = chosen.get(Stage.ADMISSION)
    ordering = chosen.get(Stage.ORDERING)
    scaling = chosen.get(Stage.SCALING)
    placement = chosen.get(Stage.PLACEMENT)
    return Fallbacks(
        admission=None
        if admission is None
        else registry.admission(admission.name, admission.params, models),
        ordering=None
        if ordering is None
        else registry.ordering(ordering.name, ordering.params, models),
        scaling=None if scaling is None else registry.scaling(scaling.name, scaling.params, models),
        placement=None
        if placement is None
        else registry.placement(placement.name, placement.params, models),
    )


def _guarded(stage: Stage, call: Callable[[P], T], policy: P) -> T:
    """`call(policy)`, with anything it raises turned into a PolicyFault naming the policy."""
    try:
        return call(policy)
    except PolicyFault:
        raise
    except Exception as exc:
        raise _raised(stage, policy, exc) from exc


def _raised(stage: Stage, policy: object, exc: Exception) -> PolicyFault:
    """The fault for a policy that raised `exc`: which stage, which policy, what it raised."""
    return PolicyFault(stage, _name(policy), f"raised {type(exc).__name__}: {exc}")


def _check_one_each(stage: Stage, policy: object, ids: list[str], jobs: Sequence[Job]) -> bool:
    """Raise unless `ids` name each of `jobs` exactly once; return whether in their order."""
    job_ids = [j.id for j in jobs]
    if ids == job_ids:  # compared as lists, in C
        return True  # the usual answer: each job once (a snapshot's job ids are unique)
    # Another order (a reordering policy's every answer): the sets are built from the two
    # lists, without a second walk over the jobs for their ids.
    expected = set(job_ids)
    if len(ids) != len(expected) or set(ids) != expected:
        missing = sorted(expected - set(ids))[:5]
        extra = sorted(set(ids) - expected)[:5]
        raise PolicyFault(
            stage,
            _name(policy),
            f"must answer each of its {len(expected)} jobs exactly once "
            f"(got {len(ids)}; missing {missing}, unexpected {extra})",
        )
    return False


def _shrink(job: Job, placement: tuple[Assignment, ...], workers: int) -> tuple[Assignment, ...]:
    """Keep `workers` workers, dropping from the nodes that hold the fewest first."""
    gpw = job.gpus_per_worker
    left = workers * gpw
    kept: list[Assignment] = []
    for a in sorted(placement, key=lambda a: -len(a.gpu_indices)):
        if left <= 0:
            break
        take = min(left, len(a.gpu_indices))
        kept.append(Assignment(node_id=a.node_id, gpu_indices=a.gpu_indices[:take]))
        left -= take
    return tuple(kept)


def _difference(
    full: tuple[Assignment, ...], kept: tuple[Assignment, ...]
) -> tuple[Assignment, ...]:
    kept_by_node = {a.node_id: set(a.gpu_indices) for a in kept}
    out = []
    for a in full:
        gone = tuple(g for g in a.gpu_indices if g not in kept_by_node.get(a.node_id, set()))
        if gone:
            out.append(Assignment(node_id=a.node_id, gpu_indices=gone))
    return tuple(out)


def _merge(old: tuple[Assignment, ...], new: tuple[Assignment, ...]) -> tuple[Assignment, ...]:
    by_node: dict[str, list[int]] = {}
    for a in (*old, *new):
        by_node.setdefault(a.node_id, []).extend(a.gpu_indices)
    return tuple(Assignment(node_id=n, gpu_indices=tuple(sorted(g))) for n, g in by_node.items())
