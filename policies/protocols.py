"""One small contract per decision stage.

Each protocol is the whole agreement between the engine and a policy of that
stage: what the policy may assume about its inputs and what it must return.
Policies are pure: they read the context and their inputs and return new
values; the engine applies them and checks every invariant again, so a buggy
policy yields an error, never an invalid decision.

Every policy class also carries `name`, `version`, `stage`, a one-line
`summary`, its `source` (paper or system) and a nested pydantic `Params` model
whose fields describe its parameters; :mod:`policies.registry` relies on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import ClassVar, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from policies.capacity import FreeCapacity
from policies.decision import AdmissionResult, ScalingResult, Stage
from policies.model import Assignment, Frozen, Job, Snapshot


@dataclass(frozen=True)
class Context:
    """What every policy may read besides its direct inputs."""

    snapshot: Snapshot
    seed: int = 0
    gpus_by_tenant: dict[str, int] = field(default_factory=dict)
    """GPUs held by each tenant's running jobs when the round starts."""

    @property
    def now(self) -> float:
        return self.snapshot.now

    @property
    def capacity_gpus(self) -> int:
        return self.snapshot.training_gpus()


class Ordering(Frozen):
    """An ordering of the schedulable jobs and how the engine should walk it."""

    job_ids: tuple[str, ...]
    preemptive: bool = Field(
        default=False,
        description="Running jobs lower in the order may be preempted for higher ones.",
    )
    backfill: bool = Field(
        default=False,
        description="A job that does not fit lets later jobs start (else it blocks them).",
    )


class PlacementOutcome(Frozen):
    """Assignments for a job, or why it cannot be placed (an expected outcome, not a fault)."""

    assignments: tuple[Assignment, ...] = ()
    reason: str = ""

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


class NoParams(BaseModel):
    """This policy takes no parameters."""

    model_config = {"extra": "forbid", "frozen": True}
