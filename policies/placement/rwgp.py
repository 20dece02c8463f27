"""The dual agent's placement agent: RWGP, a GP over machines, and a learned risk attitude.

Xing et al., "A Dual-Agent Scheduler for Distributed Deep Learning Jobs on Public
Cloud via Reinforcement Learning", KDD 2023: the placement agent learns the
performance similarity of GPU machines with a Random-Walk Gaussian Process, aware
of the uncertainty that unbalanced machine performance and contention put on job
duration. Here (the paper's details are not available; docs/dual-agent.md):

1. The GP (:mod:`policies.learned.dual_agent.gp`) gives each machine a posterior
   mean `μ` and standard deviation `σ` of its log speed factor, from the
   throughput observed on it (`state["rwgp"]`, fed by `POST /v1/feedback` and,
   in simulation, by the simulator).
2. A machine's predicted speed for the job is the job's table speed on its GPU
   type times `e^μ`; it is ranked by `log(speed) + κσ − log(price + λ)`, with the
   risk attitude `κ` and the value of time `λ` learned jointly with the ordering
   agent (:class:`policies.learned.dual_agent.network.PlacementHead`).
3. The job takes its GPUs in that order (:func:`policies.placement.hetero_greedy.ranked_plan`),
   unless the slowest machine of that plan would run it at under `θ` (the learned
   patience) of its speed on the best GPU type the cluster has for it: then it
   waits for a faster machine, up to `patience_max_wait_s` (ours: delay scheduling,
   Zaharia et al., EuroSys 2010, applied to GPU types instead of data locality).
4. The placement reports the predicted speed, its uncertainty and the price in the
   decision's placement `details`.

A missing or corrupt model, a non-finite ranking or a decision over the latency
budget raises, and the profile's fallback (`consolidated`) answers and says so.
Between retrainings the state learns from feedback: :meth:`RwgpPlacement.learn`.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Mapping, Sequence
from typing import ClassVar

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, JsonValue

from policies.capacity import FreeCapacity, assignments_for, not_enough_room
from policies.decision import Stage
from policies.learned.dual_agent.gp import (
    GpSession,
    MachineObservations,
    Posterior,
    posterior,
    warm_up,
)
from policies.learned.dual_agent.loading import MODEL_KEY, load
from policies.learned.dual_agent.network import DualAgentModel
from policies.learned.models import (
    InvalidActionError,
    LatencyBudgetExceededError,
    ModelBlob,
    ModelUnavailableError,
)
from policies.learned.weights import Served, ServesModel
from policies.model import Job, Node, ThroughputObservation
from policies.placement.hetero_greedy import MIN_PRICE, ranked_plan
from policies.protocols import Context, PlacementOutcome, StateValue

STATE_KEY = "rwgp"
STATE_VERSION = 1
MAX_WEIGHT = 200.0
"""Most observations a machine's mean stands for: older ones fade (exponential forgetting),
so a machine whose speed changes (a failing fan, a new neighbour) is relearned (ours)."""


PATIENCE_MAX_WAIT_S = 4 * 3600.0
"""Longest a job waits for a faster GPU type before it takes a slower one (ours: a bound,
as delay scheduling's, so a job is never kept off idle machines indefinitely; four hours
is the longest job of the training episodes)."""

TypeRoom = Mapping[str, tuple[tuple[int, float], ...]]
"""Per GPU type, (GPUs, GPU memory in GB) of every machine training may use."""


def type_room(nodes: Sequence[Node]) -> TypeRoom:
    room: dict[str, list[tuple[int, float]]] = {}
    for node in nodes:
        room.setdefault(node.gpu_type, []).append((node.gpus, node.gpu_memory_gb))
    return {gpu_type: tuple(machines) for gpu_type, machines in room.items()}


def best_type_speed(job: Job, workers: int, room: TypeRoom) -> tuple[str, float]:
    """The job's table speed on the fastest GPU type whose machines, all free, would hold
    `workers` of its workers (the type and the speed; ("", 0) when none would)."""
    best = ("", 0.0)
    for gpu_type, machines in room.items():
        fit = sum(
            gpus // job.gpus_per_worker for gpus, memory in machines if memory >= job.gpu_memory_gb
        )
        speed = job.gpu_type_speed.get(gpu_type, 1.0)
        if fit >= workers and speed > best[1]:
            best = (gpu_type, speed)
    return best


def waits_for_faster(
    job: Job,
    workers: int,
    *,
    plan_log_speed: float,
    room: TypeRoom,
    patience: float,
    waited_s: float,
    max_wait_s: float,
) -> str | None:
    """Why the job rather waits than starts at `plan_log_speed` (its slowest machine's
    predicted log speed), or None to start now.

    A synchronous job runs at its slowest machine for as long as it runs: started on a
    type several times slower, it holds those GPUs several times longer, paying for each
    hour, while a faster machine often frees within minutes. The served policy and the
    training environment both decide with this function.
    """
    if waited_s >= max_wait_s:
        return None
    # Most plans are on the job's fastest type or close to it: no type of the cluster is
    # fast enough to make them wait, whatever its room, and no machine need be counted.
    fastest = max((job.gpu_type_speed.get(gpu_type, 1.0) for gpu_type in room), default=0.0)
    if math.exp(plan_log_speed) >= patience * fastest:
        return None
    best_type, best = best_type_speed(job, workers, room)
    if best <= 0.0:
        return None
    relative = math.exp(plan_log_speed) / best
    if relative >= patience:
        return None
    return (
        f"waits for a faster machine: the free ones would run it at {relative:.0%} of its "
        f"speed on {best_type} (patience {patience:.0%})"
    )


class RwgpParams(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    latency_budget_ms: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Most wall-clock milliseconds the GP posterior of one decision may take (0: give "
            "up); about 0.15 s for 500 observed machines on one core. Default: no clock "
            "(decisions stay deterministic; ARBITER_DECISION_CPU_BUDGET_MS bounds them)."
        ),
    )
    use_shipped_model: bool = Field(
        default=True, description="With no model version active, use the shipped model."
    )
    use_gp: bool = Field(
        default=True,
        description=(
            "False: rank by the static speed table alone (μ = σ = 0), the ablation "
            "'placement without the GP'."
        ),
    )
    spread_penalty: float = Field(
        default=0.85, gt=0, le=1, description="Speed kept by a job spread over machines."
    )
    max_machines: int = Field(
        default=2048, ge=1, description="Larger clusters fall back (the GP is O(n³) in machines)."
    )
    patience_max_wait_s: float = Field(
        default=PATIENCE_MAX_WAIT_S,
        ge=0,
        description=(
            "A job that has waited this long takes the machines it can get, however slow "
            "(0: never wait for a faster GPU type)."
        ),
    )


def observations_of(state: StateValue | None) -> MachineObservations:
    """The per-machine summaries kept under `rwgp`; empty when absent or unreadable."""
    nodes = state.get("nodes") if isinstance(state, dict) else None
    if not isinstance(state, dict) or state.get("version") != STATE_VERSION:
        return MachineObservations({}, {})
    mean: dict[str, float] = {}
    count: dict[str, float] = {}
    if isinstance(nodes, dict):
        for node_id, entry in nodes.items():
            if not isinstance(entry, list) or len(entry) != 2:
                continue
            weight, value = entry
            if (
                isinstance(weight, int | float)
                and isinstance(value, int | float)
                and math.isfinite(weight)
                and math.isfinite(value)
                and weight > 0
            ):
                count[node_id], mean[node_id] = float(weight), float(value)
    return MachineObservations(mean, count)


def learn_from(
    state: StateValue | None, observations: Sequence[ThroughputObservation]
) -> JsonValue:
    """Fold observations into the per-machine [weight, mean log factor] summaries."""
    known = observations_of(state)
    count, mean = dict(known.count), dict(known.mean)
    for seen in observations:
        # The type's `gt=0` holds only for decoded observations; one built in code is not
        # checked, and a speed of 0 or infinity has no log factor to learn.
        if not (0.0 < seen.relative_speed < math.inf):
            continue
        value = math.log(seen.relative_speed)
        weight = min(count.get(seen.node_id, 0.0), MAX_WEIGHT - 1.0) + 1.0
        previous = mean.get(seen.node_id, 0.0)
        mean[seen.node_id] = previous + (value - previous) / weight
        count[seen.node_id] = weight
    nodes: dict[str, JsonValue] = {
        node_id: [count[node_id], mean[node_id]] for node_id in sorted(count)
    }
    return {"version": STATE_VERSION, "nodes": nodes}


class _PosteriorCache(threading.local):
    """One posterior per decision (placement asks once per job), per decision thread."""

    nodes: tuple[Node, ...] | None = None
    state: object = None
    value: Posterior | None = None
    room: TypeRoom | None = None


class RwgpPlacement(ServesModel[DualAgentModel]):
    name: ClassVar[str] = "rwgp"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = (
        "A GP over machines (random-walk graph kernel) predicts speed; a learned risk "
        "attitude ranks machines by speed per dollar, and a learned patience waits for "
        "a faster GPU type."
    )
    source: ClassVar[str] = (
        "Xing et al., A Dual-Agent Scheduler for Distributed Deep Learning Jobs on Public "
        "Cloud via Reinforcement Learning, KDD 2023 (RWGP)."
    )
    Params: ClassVar[type[RwgpParams]] = RwgpParams
    model_key: ClassVar[str] = MODEL_KEY
    state_key: ClassVar[str] = STATE_KEY

    def __init__(self, params: RwgpParams, model: ModelBlob | None = None) -> None:
        self.params = params
        self._serve(load(model, params.use_shipped_model))
        self._cache = _PosteriorCache()
        self._session: GpSession | None = None
        if self._model is not None and params.use_gp:
            warm_up()

    @classmethod
    def with_model(
        cls, model: DualAgentModel, version: str = "in-memory", params: RwgpParams | None = None
    ) -> RwgpPlacement:
        """A policy serving `model` as it is; for trainers and tests."""
        policy = cls((params or RwgpParams()).model_copy(update={"use_shipped_model": False}))
        policy._serve(Served(model, version, ""))
        return policy

    def learn(
        self, state: StateValue | None, observations: Sequence[ThroughputObservation]
    ) -> JsonValue:
        return learn_from(state, observations)

    def posterior(self, ctx: Context) -> Posterior:
        """Every training machine's posterior: computed once per decision, and reused while
        neither the machines nor the state object change (a simulator's rounds)."""
        model = self._model
        if model is None:
            raise ModelUnavailableError(self._unavailable)
        state = ctx.state.get(STATE_KEY)
        cache = self._cache
        nodes = [n for n in ctx.snapshot.nodes if n.schedulable_for_training]
        if (
            cache.value is not None
            and cache.state is state
            and cache.nodes is not None
            and len(cache.nodes) == len(nodes)
            and all(a == b for a, b in zip(cache.nodes, nodes, strict=True))
        ):
            return cache.value
        if len(nodes) > self.params.max_machines:
            raise LatencyBudgetExceededError(
                f"{len(nodes)} machines, over the GP's limit of {self.params.max_machines}"
            )
        started = time.perf_counter()
        if self.params.use_gp:
            session = self._session
            if session is None or not session.matches(nodes):
                session = self._session = GpSession(nodes)
            value = posterior(nodes, observations_of(state), model.gp_hyper(), session)
        else:
            ids = tuple(n.id for n in nodes)
            value = Posterior(ids, np.zeros(len(ids)), np.zeros(len(ids)))
        elapsed_ms = (time.perf_counter() - started) * 1000.0
        budget_ms = self.params.latency_budget_ms
        if budget_ms is not None and elapsed_ms > budget_ms:
            raise LatencyBudgetExceededError(
                f"GP posterior over {len(nodes)} machines took {elapsed_ms:.1f} ms, over the "
                f"budget of {budget_ms:g} ms"
            )
        if not (np.isfinite(value.mean).all() and np.isfinite(value.std).all()):
            raise InvalidActionError("the GP posterior is not finite")
        if cache.nodes is None or cache.room is None or cache.nodes != tuple(nodes):
            cache.room = type_room(nodes)
        cache.nodes, cache.state, cache.value = tuple(nodes), state, value
        return value

    def type_room(self, ctx: Context) -> TypeRoom:
        """:func:`type_room` of the decision's training machines (kept with the posterior)."""
        self.posterior(ctx)
        room = self._cache.room
        assert room is not None
        return room

    def machine_scores(
        self, ctx: Context, job: Job, nodes: Sequence[Node]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(score, predicted log speed, σ, price) of each of `nodes` for `job`."""
        model = self._model
        if model is None:
            raise ModelUnavailableError(self._unavailable)
        post = self.posterior(ctx)
        index = {node_id: i for i, node_id in enumerate(post.node_ids)}
        rows = [index[n.id] for n in nodes]
        mu, sigma = post.mean[rows], post.std[rows]
        table = np.array([max(job.gpu_type_speed.get(n.gpu_type, 1.0), 1e-6) for n in nodes])
        price = np.array([max(n.price_per_gpu_hour, MIN_PRICE) for n in nodes])
        log_speed = np.log(table) + mu
        head = model.placement
        risk = float(head.risk.detach()[0])
        time_value = float(head.time_value.detach()[0])
        score = log_speed + risk * sigma - np.log(price + time_value + 1e-3)
        if not np.isfinite(score).all():
            raise InvalidActionError("the placement ranking is not finite")
        return score, log_speed, sigma, price

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        nodes = [free.node(node_id) for node_id, _ in free.candidate_nodes(job)]
        if not nodes:
            return PlacementOutcome(reason=not_enough_room(job, workers, 0))
        score, log_speed, sigma, price = self.machine_scores(ctx, job, nodes)
        by_id = {n.id: i for i, n in enumerate(nodes)}
        plan = ranked_plan(
            job,
            workers,
            free,
            {n.id: float(score[i]) for i, n in enumerate(nodes)},
            self.params.spread_penalty,
        )
        if isinstance(plan, str):
            return PlacementOutcome(reason=plan)
        used = [by_id[node_id] for node_id, _ in plan]
        # A synchronous job runs at its slowest worker: report that machine.
        slowest = min(used, key=lambda i: float(log_speed[i]))
        model = self._model
        assert model is not None
        wait = waits_for_faster(
            job,
            workers,
            plan_log_speed=float(log_speed[slowest]),
            room=self.type_room(ctx),
            patience=float(model.placement.patience.detach()[0]),
            waited_s=ctx.snapshot.now - job.submit_time,
            max_wait_s=self.params.patience_max_wait_s,
        )
        if wait is not None:
            return PlacementOutcome(reason=wait)
        gpus = [count * job.gpus_per_worker for _, count in plan]
        details: dict[str, JsonValue] = {
            "predicted_speed": round(math.exp(float(log_speed[slowest])), 4),
            "speed_std": round(float(sigma[slowest]), 4),
            "price_per_gpu_hour": round(
                sum(float(price[i]) * g for i, g in zip(used, gpus, strict=True)) / sum(gpus), 4
            ),
            "gp_machines_observed": len(observations_of(ctx.state.get(STATE_KEY)).count),
        }
        return PlacementOutcome(assignments=assignments_for(free, job, plan), details=details)


def speeds_by_node(posterior_value: Posterior) -> Mapping[str, tuple[float, float]]:
    """Node → (posterior mean, std) of its log speed factor; for reports and tests."""
    return {
        node_id: (float(posterior_value.mean[i]), float(posterior_value.std[i]))
        for i, node_id in enumerate(posterior_value.node_ids)
    }
