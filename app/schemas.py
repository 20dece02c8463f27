"""Request and response bodies of the HTTP API (the snapshot and decision are the core's).

Bodies that carry a snapshot are msgspec Structs like the snapshot itself, decoded
straight from the raw body; the others are pydantic models, as FastAPI expects.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from msgspec import Meta
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
)

from policies.decision import Stage
from policies.dispatch.model import DispatchSnapshot
from policies.model import MAX_WORKERS, Frozen, Snapshot
from simulator.cluster import ClusterSpec, cluster_from_json

MAX_SEED = 2**31 - 1
"""Seeds are 31-bit, as the simulator derives them: a larger one is a caller's error."""


class DecisionRequest(Frozen, frozen=True, kw_only=True):
    """POST /v1/decisions."""

    profile: Annotated[
        str, Meta(description="Profile name, see GET /v1/profiles.", examples=["tiresias"])
    ]
    snapshot: Snapshot
    stages: (
        Annotated[
            list[Literal["admission", "ordering", "scaling", "placement"]],
            Meta(
                description=(
                    "Subset of stages to run (their prerequisites run too); default all. "
                    "Reclaims are not a stage: POST /v1/reclaim."
                )
            ),
        ]
        | None
    ) = None
    seed: Annotated[int, Meta(ge=0, le=MAX_SEED, description="Seed of randomised policies.")] = 0

    @property
    def engine_stages(self) -> list[Stage] | None:
        return None if self.stages is None else [Stage(s) for s in self.stages]


class StageDecisionRequest(Frozen, frozen=True, kw_only=True):
    """POST /v1/decisions/{stage}: that stage and its prerequisites."""

    profile: Annotated[str, Meta(description="Profile name.", examples=["fifo"])]
    snapshot: Snapshot
    seed: Annotated[int, Meta(ge=0, le=MAX_SEED, description="Seed of randomised policies.")] = 0


class ReclaimRequestBody(Frozen, frozen=True, kw_only=True):
    """POST /v1/reclaim: give exactly one of `count` and `node_ids`."""

    profile: Annotated[
        str, Meta(description="Profile name; its `reclaim` policy answers.", examples=["aryl"])
    ]
    snapshot: Snapshot
    count: (
        Annotated[
            int,
            Meta(
                ge=1,
                le=MAX_WORKERS,
                description="Return this many loaned servers; the policy picks them.",
            ),
        ]
        | None
    ) = None
    node_ids: (
        Annotated[
            list[str],
            Meta(
                min_length=1,
                description="Return exactly these loaned servers; the answer says what that does.",
            ),
        ]
        | None
    ) = None
    seed: Annotated[int, Meta(ge=0, le=MAX_SEED, description="Seed of randomised policies.")] = 0


class DispatchRequestBody(Frozen, frozen=True, kw_only=True):
    """POST /v1/dispatch."""

    profile: Annotated[
        str,
        Meta(description="Profile name; its `dispatch` policy answers.", examples=["relmas"]),
    ]
    snapshot: DispatchSnapshot


class _Event(BaseModel):
    """What every feedback event carries. Each kind names itself in `kind`, which has no
    default: it tells the events apart, so the spec lists it as required, as it is."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event_id: str = Field(min_length=1, max_length=128, description="Idempotency key.")
    cluster_id: str = Field(default="default", min_length=1, max_length=255)
    decision_id: str | None = Field(
        default=None, max_length=128, description="Decision this outcome follows."
    )
    occurred_at: float | None = Field(
        default=None, allow_inf_nan=False, description="Caller's clock, seconds."
    )


class JobFinished(_Event):
    kind: Literal["job_finished"]
    job_id: str = Field(min_length=1, max_length=255)
    submitted_at: float | None = Field(default=None, allow_inf_nan=False)
    started_at: float | None = Field(
        default=None,
        allow_inf_nan=False,
        description=(
            "When the job started, on the caller's clock. With `finished_at`, the run that "
            "DL2's retraining replays for the job when it ran as requested (docs/dl2.md)."
        ),
    )
    finished_at: float = Field(allow_inf_nan=False)
    outcome: Literal["completed", "failed", "killed"] = "completed"

    # Times in order, each against the ones before it (the caller's clock throughout): an
    # event whose job starts before it was submitted, or ends before it started, is a
    # mistake the log would keep and retraining would read as a run of negative length.
    @field_validator("started_at")
    @classmethod
    def _not_before_submission(cls, value: float | None, info: ValidationInfo) -> float | None:
        submitted = info.data.get("submitted_at")
        if value is not None and submitted is not None and value < submitted:
            raise ValueError(f"{value:g} is before submitted_at {submitted:g}")
        return value

    @field_validator("finished_at")
    @classmethod
    def _not_before_start(cls, value: float, info: ValidationInfo) -> float:
        for earlier in ("started_at", "submitted_at"):
            before = info.data.get(earlier)
            if before is not None and value < before:
                raise ValueError(f"{value:g} is before {earlier} {before:g}")
        return value


class ThroughputObserved(_Event):
    kind: Literal["throughput"]
    job_id: str = Field(min_length=1, max_length=255)
    node_id: str | None = None
    gpu_type: str | None = None
    workers: int | None = Field(
        default=None, ge=1, le=MAX_WORKERS, description="Workers the job ran with."
    )
    samples_per_s: float = Field(ge=0, allow_inf_nan=False)
    model: str | None = Field(
        default=None, max_length=255, description="The job's model or model family."
    )
    expected_samples_per_s: float | None = Field(
        default=None,
        gt=0,
        allow_inf_nan=False,
        description=(
            "What the job's speed table expected on this node's GPU type. With `node_id`, "
            "the ratio `samples_per_s / expected_samples_per_s` teaches feedback-learning "
            "policies (the dual agent's GP) this machine's own speed, between retrainings."
        ),
    )


class InferenceOutcome(_Event):
    kind: Literal["inference"]
    request_id: str = Field(min_length=1)
    accelerator_id: str | None = None
    latency_ms: float = Field(ge=0, allow_inf_nan=False)
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
    settles: bool = Field(
        description=(
            "Asked again with nothing changed but the clock (no job arrived, finished or "
            "changed, no node came or went) since its last decision was carried out, the "
            "profile changes nothing: calling it on such events only is enough. False for "
            "profiles that read the time, jobs' progress or the seed, preempt, or rescale."
        )
    )
    gathers: bool = Field(
        description=(
            "Moves a running job spread over several nodes onto one once a node has room "
            "for all of it (status `moved` in the decision: the job restarts there). A "
            "caller that asks only while jobs wait should also ask when GPUs free up "
            "while such a job runs."
        )
    )
    learns_from_feedback: bool = Field(
        description=(
            "A policy of the profile learns from `throughput` feedback between decisions "
            "(the dual agent's GP of machine speeds): `POST /v1/feedback` events with "
            "`node_id` and `expected_samples_per_s` change its next decisions for that "
            "`cluster_id`. A caller of such a profile should report the speeds its jobs "
            "reach; they change no decision of a profile that says false (they are still logged)."
        )
    )
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


class ClusterStateDroppedOut(BaseModel):
    """What `DELETE /admin/clusters/{cluster_id}/state` removed."""

    cluster_id: str
    dropped: list[str] = Field(
        description=(
            "The keys the cluster had, now removed: policy state keys (`oasis`, `tiresias`, "
            "`rwgp`, …) and `learned-events` for its learned feedback event ids."
        ),
        examples=[["oasis", "rwgp", "learned-events"]],
    )
    absent: list[str] = Field(
        description="The keys asked for that the cluster did not have: nothing to remove.",
        examples=[["tiresias"]],
    )


class _AdminBody(BaseModel):
    """Admin request bodies: no string may hold a NUL character, which no column stores."""

    @field_validator("*", mode="after")
    @classmethod
    def _no_nul(cls, value: object) -> object:
        if isinstance(value, str) and "\x00" in value:
            raise ValueError("contains a NUL character")
        return value


class ActivateRequest(_AdminBody):
    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(min_length=1, examples=["20261121-1"])


class RetrainWindow(_AdminBody):
    """Which logged decisions to imitate, by the time they were logged (UTC when naive)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    since: datetime | None = Field(default=None, description="Inclusive; default: the first.")
    until: datetime | None = Field(default=None, description="Exclusive; default: now.")


class RetrainRequest(_AdminBody):
    model_config = ConfigDict(extra="forbid", frozen=True)

    policy: str = Field(min_length=1, description="Learned policy to retrain.", examples=["dl2"])
    window: RetrainWindow = Field(default_factory=RetrainWindow)
    profile: str | None = Field(
        default=None, description="Imitate only decisions served under this profile."
    )
    budget: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "How much work the retraining does, in the learned policy's own budget schema "
            "(`GET /admin/trainers` lists each one's fields and defaults: the shipped model's "
            "run). Every schema has `updates`, `held_out_episodes` and `max_records`; a field "
            "the policy's schema does not have is a 422."
        ),
        examples=[{"updates": 20}],
    )
    activate: Literal["if_better", "always", "never"] = Field(
        default="if_better",
        description="Activate the new version if it beats the active one on held-out episodes, "
        "always, or never (store it only).",
    )
    seed: int = Field(
        default=0, ge=0, le=MAX_SEED, description="Seeds imitation, RL and initial weights."
    )
    start: Literal["incumbent", "scratch"] = Field(
        default="incumbent",
        description="Start from the active version's weights, or from fresh ones.",
    )
    since: datetime | None = Field(default=None, description="Short for `window.since`.")
    steps: int | None = Field(
        default=None, ge=0, le=10_000, description="Short for `budget.updates` (small: smoke run)."
    )
    exclude_callers: list[str] = Field(
        default_factory=list,
        max_length=100,
        description=(
            "Callers (ARBITER_API_TOKENS) whose logged decisions are left out of the "
            "training data, e.g. one whose snapshots are not to be trusted."
        ),
    )
    concurrent: bool = Field(
        default=False,
        description=(
            "Queue it even when a retraining of the same policy and profile is queued or "
            "running (by default that is refused with 409, naming the active job)."
        ),
    )


class TrainerOut(BaseModel):
    """A learned policy that can be retrained, and the budget its retraining takes."""

    name: str = Field(description="The policy's model key: `policy` of a retrain request.")
    summary: str
    stages: list[str] = Field(description="Progress stages of its retraining, in order.")
    needs_logged_decisions: bool = Field(
        description="Whether a window with no logged decision is refused (nothing to imitate)."
    )
    budget: dict[str, Any] = Field(description="JSON schema of its `budget`, with defaults.")


class RetrainProgressOut(BaseModel):
    stage: str = Field(
        description=(
            "`loading`, then the policy's own stages in order (`GET /admin/trainers`), "
            "then `storing`."
        )
    )
    fraction: float = Field(ge=0, le=1, description="Fraction of that stage done.")


class RetrainJobOut(BaseModel):
    id: str
    policy: str
    status: Literal["queued", "running", "succeeded", "failed"]
    progress: RetrainProgressOut | None = None
    version: str | None = Field(default=None, description="The model version it stored.")
    metrics: dict[str, Any] | None = Field(
        default=None, description="Held-out comparison with the active version, and timings."
    )
    error: str | None = None
    params: dict[str, Any] = Field(description="The request, as normalised.")
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None = None
    finished_at: datetime | None = None


class TraceRow(BaseModel):
    """One job of a trace, in the common schema of `shared/traces` (its README)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    job_id: str = Field(min_length=1, max_length=255, description="Unique job id.")
    submit_time_s: float = Field(
        ge=0, allow_inf_nan=False, description="Submission, seconds; rows sorted by it."
    )
    num_gpus: int = Field(ge=1, le=100_000, description="GPUs the job asked for.")
    duration_s: float = Field(gt=0, allow_inf_nan=False, description="Recorded run time.")
    gpu_type: str | None = Field(default=None, description="GPU model it ran on, if known.")
    user: str | None = Field(default=None, description="Submitting user (the tenant).")
    status: str | None = Field(default=None, description="Final status as recorded.")
    vc: str | None = Field(default=None, description="Virtual cluster or queue.")
    num_nodes: int | None = Field(default=None, ge=1, description="Nodes it spanned.")
    num_cpus: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    memory_mib: float | None = Field(default=None, ge=0, allow_inf_nan=False)
    gpu_milli: int | None = Field(
        default=None, ge=1, le=1000, description="Thousandths of a GPU (fractional jobs)."
    )
    qos: str | None = Field(default=None, description="Quality-of-service class.")
    submit_datetime: str | None = Field(default=None, description="Wall-clock submission.")


class SimulateWorkload(BaseModel):
    """What traces lack, filled as `arbiter simulate` fills it (docs/simulator.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_mix: str = Field(
        default="all",
        description="Model families: all, gavel, pollux, generic, a family, or a comma list.",
    )
    elastic_fraction: float = Field(
        default=0.0, ge=0, le=1, description="Share of jobs that accept half to twice workers."
    )
    ps_fraction: float = Field(
        default=0.0, ge=0, le=1, description="Share of jobs trained with parameter servers."
    )
    estimate_error: float = Field(
        default=0.0, ge=0, le=10, description="Sigma of log-normal noise on duration estimates."
    )
    utility: Literal["none", "sigmoid", "step"] = Field(
        default="none", description="Job utilities (OASiS): sigmoid decay or a step deadline."
    )
    utility_value: Literal["gpu-hours", "priority"] = Field(
        default="gpu-hours", description="A utility's value: GPU-hours or a seeded priority."
    )


class SimulateSnapshot(Frozen, frozen=True, kw_only=True):
    """The `snapshot` of a what-if request, decoded (and checked) as a decision's is."""

    snapshot: Snapshot


_SNAPSHOT_OR_NULL: dict[str, Any] = {
    # The core's Snapshot is a msgspec Struct, which pydantic cannot refer to: the OpenAPI
    # spec links it in (:func:`link_snapshot_schema`).
    "anyOf": [{"type": "object"}, {"type": "null"}],
    "default": None,
    "description": (
        "The cluster now, as a decision's snapshot: its nodes become the cluster, its "
        "running jobs keep their GPUs and its waiting jobs wait, at time 0. Every job "
        "needs `estimated_duration_s` (its work left follows from its progress). Give "
        "either `trace` and `cluster`, or `snapshot` (and `arrivals`)."
    ),
}


def link_snapshot_schema(schemas: dict[str, Any]) -> None:
    """Point the what-if request's `snapshot` at the spec's `Snapshot` component."""
    field = schemas["SimulateRequest"]["properties"]["snapshot"]
    field["anyOf"][0] = {"$ref": "#/components/schemas/Snapshot"}


class SimulateRequest(BaseModel):
    """POST /v1/simulate: a small trace on a cluster, or a cluster's current state and the
    jobs still to come, under one or more profiles."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    trace: list[TraceRow] | None = Field(
        default=None,
        min_length=1,
        description=(
            "Jobs in the shared trace schema, sorted by submit time (with `cluster`; not "
            "with `snapshot`)."
        ),
    )
    cluster: ClusterSpec | None = Field(
        default=None,
        description=(
            "A cluster spec in the schema of `shared/clusters` (not a trace's own "
            "`*.cluster.json`, which describes where the trace was recorded); with `trace`."
        ),
    )
    snapshot: Annotated[dict[str, Any] | None, WithJsonSchema(_SNAPSHOT_OR_NULL)] = None
    arrivals: list[TraceRow] = Field(
        default_factory=list,
        description=(
            "With `snapshot`: jobs still to come, in the shared trace schema, sorted; "
            "`submit_time_s` counts seconds from the snapshot's instant."
        ),
    )
    profiles: list[str] = Field(
        min_length=1, description="Profiles to compare, on the same jobs and seed."
    )
    seed: int = Field(default=0, ge=0, le=MAX_SEED, description="Seed of every random draw.")
    perf_model: Literal["measured", "ideal"] = Field(
        default="measured",
        description="measured: the effects of docs/performance-model.md; ideal: none of them.",
    )
    workload: SimulateWorkload = Field(default_factory=SimulateWorkload)
    round_period_s: float = Field(
        default=60.0,
        ge=0,
        le=86_400,
        description="Seconds between timer rounds, at least 1 (0: no timer rounds).",
    )
    loan_idle: bool = Field(default=False, description="Lend idle inference servers to training.")

    @field_validator("round_period_s")
    @classmethod
    def _round_period_is_a_second_or_more(cls, value: float) -> float:
        if 0 < value < 1:
            raise ValueError("timer rounds are at least 1 s apart (0: none)")
        return value

    @field_validator("cluster", mode="before")
    @classmethod
    def _not_a_trace_description(cls, value: object) -> object:
        if isinstance(value, dict) and "trace" in value and "node_groups" not in value:
            cluster_from_json(value, "cluster")  # raises, saying which file to pass
        return value


class SimulateResult(BaseModel):
    """The simulator's metrics (DESIGN §6 keys) for one profile."""

    model_config = ConfigDict(extra="allow")

    profile: str = Field(description="The profile these metrics are for.")
    jobs: int = Field(description="Jobs simulated.")
    jobs_completed: int
    avg_jct_s: float | None = Field(default=None, description="Mean job completion time.")
    gpu_utilization: float | None = Field(default=None, description="0–1.")


class SimulateResponse(BaseModel):
    results: list[SimulateResult] = Field(description="One entry per profile, in request order.")
