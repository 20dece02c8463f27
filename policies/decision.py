"""What the engine returns: decisions, with a reason for every job.

Expected outcomes (admitted, rejected, pending because …, preempted) are data
here; faults are exceptions elsewhere. Keys fixed by DESIGN §4 are kept as is.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, JsonValue

from policies.model import Assignment, Frozen


class Stage(StrEnum):
    ADMISSION = "admission"
    ORDERING = "ordering"
    SCALING = "scaling"
    PLACEMENT = "placement"
    # A separate call (POST /v1/reclaim), not part of a decision: see policies.reclaiming.
    RECLAIM = "reclaim"


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


class AdmissionResult(Frozen):
    job_id: str
    verdict: Verdict
    reason: str
    details: dict[str, JsonValue] = Field(
        default_factory=dict,
        description=(
            "Numbers behind the verdict, policy-specific (OASiS: utility, priced cost, "
            "binding resource, committed schedule); empty for most policies."
        ),
    )

    @property
    def admitted(self) -> bool:
        return self.verdict is Verdict.ADMIT


class AdmissionEntry(Frozen):
    job_id: str
    admitted: bool
    verdict: Verdict
    reason: str
    details: dict[str, JsonValue] = Field(
        default_factory=dict, description="The admission policy's numbers behind the verdict."
    )


class ScalingResult(Frozen):
    """Workers (and parameter servers) a job should run with; 0 workers = not this round."""

    job_id: str
    workers: int = Field(ge=0)
    ps: int = Field(default=0, ge=0)
    reason: str = ""


class PlacementEntry(Frozen):
    job_id: str
    assignments: tuple[Assignment, ...]


class JobNote(Frozen):
    """A job and why it ended up where it did."""

    job_id: str
    reason: str


class JobStatus(StrEnum):
    STARTED = "started"  # pending before, runs after this decision
    RUNNING = "running"  # keeps running as it was
    RESIZED = "resized"  # keeps running with a different worker count
    PENDING = "pending"
    PREEMPTED = "preempted"
    REJECTED = "rejected"


class JobExplanation(Frozen):
    job_id: str
    status: JobStatus
    reason: str


class PolicyRef(Frozen):
    name: str
    version: str


class Fallback(Frozen):
    policy: str = Field(description="The heuristic that answered instead.")
    reason: str


class Decision(Frozen):
    decision_id: str
    cluster_id: str
    now: float
    profile: str
    stages: tuple[Stage, ...]
    policies: dict[str, PolicyRef]
    admission: tuple[AdmissionEntry, ...] = ()
    ordering: tuple[str, ...] = ()
    scaling: tuple[ScalingResult, ...] = ()
    placement: tuple[PlacementEntry, ...] = Field(
        default=(), description="Every job that runs after this decision, running ones included."
    )
    preemptions: tuple[JobNote, ...] = ()
    pending: tuple[JobNote, ...] = ()
    explanations: tuple[JobExplanation, ...] = Field(
        default=(), description="One entry per job of the snapshot, with its status and reason."
    )
    fallback: Fallback | None = None
