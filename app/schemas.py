"""Request and response bodies of the HTTP API (the snapshot and decision are the core's)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue

from policies.decision import ENGINE_STAGES, Stage
from policies.model import Snapshot


def _decision_stage(stage: Stage) -> Stage:
    if stage not in ENGINE_STAGES:
        raise ValueError(f"{stage.value} is not a decision stage: POST /v1/{stage.value}")
    return stage


DecisionStage = Annotated[Stage, AfterValidator(_decision_stage)]
"""A stage the engine runs (reclaim, say, has its own endpoint)."""


class DecisionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str = Field(description="Profile name, see GET /v1/profiles.", examples=["tiresias"])
    snapshot: Snapshot
    stages: list[DecisionStage] | None = Field(
        default=None,
        description="Subset of stages to run (their prerequisites run too); default all.",
    )
    seed: int = Field(default=0, ge=0, description="Seed of randomised policies.")


class StageDecisionRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str = Field(examples=["fifo"])
    snapshot: Snapshot
    seed: int = Field(default=0, ge=0)


class ReclaimRequestBody(BaseModel):
    """POST /v1/reclaim: give exactly one of `count` and `node_ids`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    profile: str = Field(
        description="Profile name; its `reclaim` policy answers.", examples=["aryl"]
    )
    snapshot: Snapshot
    count: int | None = Field(
        default=None, ge=1, description="Return this many loaned servers; the policy picks them."
    )
    node_ids: list[str] | None = Field(
        default=None,
        min_length=1,
        description="Return exactly these loaned servers; the answer says what that does.",
    )
    seed: int = Field(default=0, ge=0, description="Seed of randomised policies.")


class _Event(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str = Field(min_length=1, max_length=200, description="Idempotency key.")
    cluster_id: str = Field(default="default", min_length=1)
    decision_id: str | None = Field(default=None, description="Decision this outcome follows.")
    occurred_at: float | None = Field(default=None, description="Caller's clock, seconds.")


class JobFinished(_Event):
    kind: Literal["job_finished"] = "job_finished"
    job_id: str = Field(min_length=1)
    submitted_at: float | None = None
    started_at: float | None = None
    finished_at: float
    outcome: Literal["completed", "failed", "killed"] = "completed"


class ThroughputObserved(_Event):
    kind: Literal["throughput"] = "throughput"
    job_id: str = Field(min_length=1)
    node_id: str | None = None
    gpu_type: str | None = None
    workers: int | None = Field(default=None, ge=1)
    samples_per_s: float = Field(ge=0)


class InferenceOutcome(_Event):
    kind: Literal["inference"] = "inference"
    request_id: str = Field(min_length=1)
    accelerator_id: str | None = None
    latency_ms: float = Field(ge=0)
    sla_met: bool


FeedbackEvent = Annotated[
    JobFinished | ThroughputObserved | InferenceOutcome, Field(discriminator="kind")
]


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    events: list[FeedbackEvent] = Field(min_length=1, max_length=10_000)


class FeedbackAccepted(BaseModel):
    accepted: int = Field(description="Events accepted; duplicates of earlier ids are ignored.")


class PolicyChoiceOut(BaseModel):
    name: str
    params: dict[str, JsonValue]


class ProfileOut(BaseModel):
    name: str
    description: str
    stages: dict[str, PolicyChoiceOut]
    fallback: dict[str, PolicyChoiceOut]


class PolicyOut(BaseModel):
    name: str
    stage: Stage
    version: str
    summary: str
    source: str
    params_schema: dict[str, Any]
    model_version: str | None = Field(
        default=None, description="Active model version of a learned policy; null otherwise."
    )


class Health(BaseModel):
    status: Literal["ok"]


class ComponentStatus(BaseModel):
    ok: bool
    detail: str


class Readiness(BaseModel):
    status: Literal["ready", "degraded"]
    components: dict[str, ComponentStatus]


class ModelVersionOut(BaseModel):
    policy: str
    version: str
    active: bool
    created_at: datetime
    metadata: dict[str, Any] = Field(
        description="Training data window, evaluation metrics, parent version."
    )


class ActivateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(min_length=1, examples=["20261121-1"])
