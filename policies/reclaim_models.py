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

from typing import Annotated

from msgspec import Meta, field

from policies.decision import Fallback, PolicyRef
from policies.model import Assignment, Frozen


class ReclaimRequest(Frozen, frozen=True):
    """How many loaned servers must go back, or exactly which: one of the two."""

    count: (
        Annotated[
            int, Meta(ge=1, description="Return this many loaned servers; the policy picks them.")
        ]
        | None
    ) = None
    node_ids: (
        Annotated[
            tuple[str, ...],
            Meta(
                min_length=1,
                description=(
                    "Return exactly these loaned servers; the policy works out the consequences."
                ),
            ),
        ]
        | None
    ) = None

    def __post_init__(self) -> None:
        # Checked while decoding too: msgspec reports it as a validation error.
        if (self.count is None) == (self.node_ids is None):
            raise ValueError("give exactly one of count and node_ids")


class ShrinkEntry(Frozen, frozen=True):
    """A job that keeps running on fewer workers once the servers are returned."""

    job_id: str
    workers: Annotated[
        int, Meta(ge=1, description="Worker count after the reclaim, one the job accepts.")
    ]
    assignments: Annotated[
        tuple[Assignment, ...],
        Meta(
            description=(
                "The GPUs the job keeps: a subset of its placement, none on returned servers."
            )
        ),
    ]


class ReclaimReasons(Frozen, frozen=True):
    servers: Annotated[
        dict[str, str], Meta(description="Why each returned server was chosen and what it costs.")
    ] = field(default_factory=dict)
    jobs: Annotated[
        dict[str, str], Meta(description="Why each shrunk or preempted job is treated so.")
    ] = field(default_factory=dict)


class ReclaimResult(Frozen, frozen=True, kw_only=True):
    """A policy's answer; :func:`policies.common.reclaim.run_reclaim` checks it before use."""

    servers: Annotated[
        tuple[str, ...], Meta(description="Loaned servers to return, in the order chosen.")
    ]
    shrink: tuple[ShrinkEntry, ...] = ()
    preempt: Annotated[tuple[str, ...], Meta(description="Jobs that must stop.")] = ()
    cost: Annotated[
        float,
        Meta(
            ge=0,
            description=(
                "Preemption cost of the answer: one per preempted job (shrinking costs nothing)."
            ),
        ),
    ]
    preempted_gpus: Annotated[int, Meta(ge=0, description="GPUs the preempted jobs held.")] = 0
    reasons: ReclaimReasons = field(default_factory=ReclaimReasons)
    shortfall: (
        Annotated[
            str,
            Meta(
                description=(
                    "Set when fewer loaned servers exist than were asked for: all are returned."
                )
            ),
        ]
        | None
    ) = None
    fallback: (
        Annotated[
            Fallback,
            Meta(description="Set when the profile's policy failed and its fallback answered."),
        ]
        | None
    ) = None


class ReclaimDecision(ReclaimResult, frozen=True, kw_only=True):
    """A reclaim as the service answers and logs it."""

    decision_id: str
    cluster_id: str
    now: float
    profile: str
    policy: PolicyRef
