"""What a reclaim asks and answers: loaned servers going back to inference.

Reclaim is its own decision type (DESIGN §2, §4), not a stage of the engine's
pipeline: the caller learns that inference needs servers back, asks which
loaned servers to return (how many, or exactly which), and gets the servers,
the training jobs that shrink (with the GPUs each keeps) and those that must be
preempted, with the cost and a reason for every server and job.

Keys fixed by DESIGN §4 (`servers`, `shrink[].job_id`, `shrink[].workers`,
`preempt`, `cost`, `reasons`) are kept as is; the rest is ours.
"""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from policies.decision import Fallback, PolicyRef
from policies.model import Assignment, Frozen


class ReclaimRequest(Frozen):
    """How many loaned servers must go back, or exactly which: one of the two."""

    count: int | None = Field(
        default=None, ge=1, description="Return this many loaned servers; the policy picks them."
    )
    node_ids: tuple[str, ...] | None = Field(
        default=None,
        min_length=1,
        description="Return exactly these loaned servers; the policy works out the consequences.",
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if (self.count is None) == (self.node_ids is None):
            raise ValueError("give exactly one of count and node_ids")
        return self


class ShrinkEntry(Frozen):
    """A job that keeps running on fewer workers once the servers are returned."""

    job_id: str
    workers: int = Field(ge=1, description="Worker count after the reclaim, one the job accepts.")
    assignments: tuple[Assignment, ...] = Field(
        description="The GPUs the job keeps: a subset of its placement, none on returned servers."
    )


class ReclaimReasons(Frozen):
    servers: dict[str, str] = Field(
        default_factory=dict, description="Why each returned server was chosen and what it costs."
    )
    jobs: dict[str, str] = Field(
        default_factory=dict, description="Why each shrunk or preempted job is treated so."
    )


class ReclaimResult(Frozen):
    """A policy's answer; :func:`policies.reclaiming.run_reclaim` checks it before use."""

    servers: tuple[str, ...] = Field(description="Loaned servers to return, in the order chosen.")
    shrink: tuple[ShrinkEntry, ...] = ()
    preempt: tuple[str, ...] = Field(default=(), description="Jobs that must stop.")
    cost: float = Field(
        ge=0,
        description=(
            "Preemption cost of the answer: one per preempted job (shrinking costs nothing)."
        ),
    )
    preempted_gpus: int = Field(default=0, ge=0, description="GPUs the preempted jobs held.")
    reasons: ReclaimReasons = ReclaimReasons()
    shortfall: str | None = Field(
        default=None,
        description="Set when fewer loaned servers exist than were asked for: all are returned.",
    )
    fallback: Fallback | None = Field(
        default=None, description="Set when the profile's policy failed and its fallback answered."
    )


class ReclaimDecision(ReclaimResult):
    """A reclaim as the service answers and logs it."""

    decision_id: str
    cluster_id: str
    now: float
    profile: str
    policy: PolicyRef
