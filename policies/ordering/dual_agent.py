"""The dual agent's ordering agent (Xing et al., KDD 2023): a learned, equivariant job order.

Xing, Mao, Yin, Pan, Zhang, Xiao, Long, "A Dual-Agent Scheduler for Distributed
Deep Learning Jobs on Public Cloud via Reinforcement Learning", KDD 2023. The
ordering agent scores every waiting and running job with one permutation-
equivariant network that squeezes the jobs' embeddings into a cluster summary
and communicates it back before scoring
(:class:`policies.learned.dual_agent.network.OrderingNetwork`); waiting jobs are
served by descending score. It is trained together with the RWGP placement agent
(:mod:`training.dual_agent`).

Ours, where the paper is not available (docs/dual-agent.md): running jobs keep
their GPUs (no preemption: on a public cloud every restart is paid for), and the
order backfills. Serving takes the scores as they are (training samples a
Plackett–Luce order from them). Safety as DL2's: a missing or corrupt model, a
non-finite score or a decision over `latency_budget_ms` raises, and the profile's
fallback (`tiresias`) answers and says so.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from policies.decision import Stage
from policies.learned.dual_agent.features import cluster_features, job_features
from policies.learned.dual_agent.loading import MODEL_KEY, load
from policies.learned.dual_agent.network import DualAgentModel
from policies.learned.models import (
    InvalidActionError,
    LatencyBudgetExceededError,
    ModelBlob,
    ModelUnavailableError,
)
from policies.learned.weights import Served, ServesModel
from policies.model import Job, JobState
from policies.protocols import Context, Ordering


class DualAgentOrderingParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_budget_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Most wall-clock milliseconds one ordering may take; past it the profile's "
            "fallback answers (0: always give up, for tests). Default: no clock (decisions "
            "stay deterministic; the service's ARBITER_DECISION_CPU_BUDGET_MS bounds them)."
        ),
    )
    use_shipped_model: bool = Field(
        default=True,
        description=(
            "With no model version active, use the model shipped with Arbiter; False: "
            "answer nothing until one is (the profile's fallback answers)."
        ),
    )


def job_scores(model: DualAgentModel, ctx: Context, jobs: Sequence[Job]) -> np.ndarray:
    """The ordering network's score of each job (same order as `jobs`)."""
    return model.scores_numpy(
        job_features(ctx.snapshot, jobs), cluster_features(ctx.snapshot, jobs)
    )


class DualAgentOrdering(ServesModel[DualAgentModel]):
    name: ClassVar[str] = "dual_agent"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ORDERING
    summary: ClassVar[str] = (
        "A learned, permutation-equivariant network scores jobs (squeeze and communicate)."
    )
    source: ClassVar[str] = (
        "Xing et al., A Dual-Agent Scheduler for Distributed Deep Learning Jobs on Public "
        "Cloud via Reinforcement Learning, KDD 2023."
    )
    Params: ClassVar[type[DualAgentOrderingParams]] = DualAgentOrderingParams
    model_key: ClassVar[str] = MODEL_KEY

    def __init__(self, params: DualAgentOrderingParams, model: ModelBlob | None = None) -> None:
        self.params = params
        self._serve(load(model, params.use_shipped_model))

    @classmethod
    def with_model(cls, model: DualAgentModel, version: str = "in-memory") -> DualAgentOrdering:
        """A policy serving `model` as it is (no bytes round trip); for trainers and tests."""
        policy = cls(DualAgentOrderingParams(use_shipped_model=False))
        policy._serve(Served(model, version, ""))
        return policy

    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        model = self._model
        if model is None:
            raise ModelUnavailableError(self._unavailable)
        started = time.perf_counter()
        # Scored in snapshot order whatever order they came in: the cluster summary is a
        # sum over the jobs, and a sum in another order can differ in its last bits,
        # enough to swap two jobs of nearly equal score.
        position = ctx.snapshot.job_positions
        jobs = sorted(jobs, key=lambda job: position.get(job.id, 0))
        scores = job_scores(model, ctx, jobs)
        if not np.isfinite(scores).all():
            raise InvalidActionError("the ordering network produced non-finite scores")
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        budget_ms = self.params.latency_budget_ms
        if budget_ms is not None and elapsed_ms > budget_ms:
            raise LatencyBudgetExceededError(
                f"{elapsed_ms:.1f} ms for {len(jobs)} jobs, over the budget of {budget_ms:g} ms"
            )
        return Ordering(job_ids=ranked_ids(ctx, jobs, scores), backfill=True)


def ranked_ids(ctx: Context, jobs: Sequence[Job], scores: np.ndarray) -> tuple[str, ...]:
    """Running jobs first (they keep their GPUs), then by descending score; ties by
    submission time and snapshot position."""
    position = ctx.snapshot.job_positions
    ranked = sorted(
        range(len(jobs)),
        key=lambda i: (
            jobs[i].state is not JobState.RUNNING,
            -float(scores[i]),
            jobs[i].submit_time,
            position.get(jobs[i].id, 0),
        ),
    )
    return tuple(jobs[i].id for i in ranked)
