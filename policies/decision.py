"""What the engine returns: decisions, with a reason for every job.

Expected outcomes (admitted, rejected, pending because …, preempted) are data
here; faults are exceptions elsewhere. Keys fixed by DESIGN §4 are kept as is.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from msgspec import Meta, field

from policies.model import Assignment, Frozen


class Stage(StrEnum):
    ADMISSION = "admission"
    ORDERING = "ordering"
    SCALING = "scaling"
    PLACEMENT = "placement"
    # A separate call (POST /v1/reclaim), not part of a decision: see policies.common.reclaim.
    RECLAIM = "reclaim"
    # A separate call too (POST /v1/dispatch): see policies.dispatch.run.
    DISPATCH = "dispatch"


ENGINE_STAGES: tuple[Stage, ...] = (
    Stage.ADMISSION,
    Stage.ORDERING,
    Stage.SCALING,
    Stage.PLACEMENT,
)


class Verdict(StrEnum):
    ADMIT = "admit"
    DEFER = "defer"  # not now; asked again next round
    REJECT = "reject"  # never


class AdmissionResult(Frozen, frozen=True):
    job_id: str
    verdict: Verdict
    reason: str
    # JSON data, or Structs of the domain model, which encode as JSON objects: OASiS
    # hands its plan to the stages after admission this way, without a round trip.
    details: Annotated[
        dict[str, Any],
        Meta(
            description=(
                "Numbers behind the verdict, policy-specific (OASiS: utility, priced cost, "
                "binding resource, committed schedule); empty for most policies."
            )
        ),
    ] = field(default_factory=dict)

    @property
    def admitted(self) -> bool:
        return self.verdict is Verdict.ADMIT


class AdmissionEntry(Frozen, frozen=True):
    job_id: str
    admitted: bool
    verdict: Verdict
    reason: str
    details: Annotated[
        dict[str, Any], Meta(description="The admission policy's numbers behind the verdict.")
    ] = field(default_factory=dict)


class ScalingResult(Frozen, frozen=True):
    """Workers (and parameter servers) a job should run with; 0 workers = not this round."""

    job_id: str
    workers: Annotated[int, Meta(ge=0)]
    ps: Annotated[int, Meta(ge=0)] = 0
    reason: str = ""


class PlacementEntry(Frozen, frozen=True, omit_defaults=True):
    job_id: str
    assignments: tuple[Assignment, ...]
    details: Annotated[
        dict[str, Any],
        Meta(
            description=(
                "The placement policy's numbers behind the choice, when it has them (the "
                "dual agent: predicted speed, its uncertainty, price); absent otherwise."
            )
        ),
    ] = field(default_factory=dict)


class JobNote(Frozen, frozen=True):
    """A job and why it ended up where it did."""

    job_id: str
    reason: str


class JobStatus(StrEnum):
    STARTED = "started"  # pending before, runs after this decision
    RUNNING = "running"  # keeps running as it was
    RESIZED = "resized"  # keeps running with a different worker count
    MOVED = "moved"  # keeps its worker count, gathered onto one node (restarts there)
    PENDING = "pending"
    PREEMPTED = "preempted"
    REJECTED = "rejected"


class JobExplanation(Frozen, frozen=True):
    job_id: str
    status: JobStatus
    reason: str


class PolicyRef(Frozen, frozen=True):
    name: str
    version: str


class Fallback(Frozen, frozen=True):
    policy: Annotated[str, Meta(description="The heuristic that answered instead.")]
    reason: str


class Decision(Frozen, frozen=True):
    decision_id: str
    cluster_id: str
    now: float
    profile: str
    stages: tuple[Stage, ...]
    policies: dict[str, PolicyRef]
    admission: tuple[AdmissionEntry, ...] = ()
    ordering: tuple[str, ...] = ()
    scaling: tuple[ScalingResult, ...] = ()
    placement: Annotated[
        tuple[PlacementEntry, ...],
        Meta(description="Every job that runs after this decision, running ones included."),
    ] = ()
    preemptions: tuple[JobNote, ...] = ()
    pending: tuple[JobNote, ...] = ()
    explanations: Annotated[
        tuple[JobExplanation, ...],
        Meta(description="One entry per job of the snapshot, with its status and reason."),
    ] = ()
    fallback: Fallback | None = None
