"""The dual agent's training environment: the simulator as a PettingZoo parallel environment.

Two agents act in every scheduling round, at once (PettingZoo's `ParallelEnv`):

* `ordering` observes the padded per-job features (:func:`job_features`), a mask of
  real jobs and the cluster features; its action is one priority score per job
  slot (waiting jobs are served by descending score, as the served agent does);
* `placement` observes, per machine, the GP posterior mean and standard deviation
  of its log speed factor, its log price and its free share; its action is one
  preference per machine, to which each job adds the log of its table speed on
  the machine's GPU type, and the job takes its GPUs in that order
  (:func:`policies.placement.hetero_greedy.ranked_plan`, the served plan); one more
  entry, last, is the log-odds of its patience `θ`: a job whose plan's slowest
  machine would run it at under `θ` of its best GPU type's speed waits
  (:func:`policies.placement.rwgp.waits_for_faster`, the served rule).

Both get the same reward, the shared objective of Xing et al. (KDD 2023): minus the
fee paid since the last round plus `jct_weight` dollars per job-hour spent in the
system (the integral of jobs in the system is the sum of their completion times).
Throughput feedback feeds the GP between rounds exactly as in serving
(:meth:`simulator.core.Simulation.throughput_observations`,
:func:`policies.placement.rwgp.learn_from`). The engine, the features and the plan
are the served ones; only the two policies read their action from the step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, ClassVar

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv
from pydantic import BaseModel, JsonValue

from policies.capacity import FreeCapacity, assignments_for
from policies.decision import Stage
from policies.engine import Fallbacks, Pipeline
from policies.learned.dual_agent.features import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    cluster_features,
    job_features,
)
from policies.learned.dual_agent.gp import GpSession, Posterior, posterior
from policies.learned.dual_agent.network import DualAgentModel
from policies.model import Job, JobState, Snapshot
from policies.ordering.dual_agent import ranked_ids
from policies.placement.hetero_greedy import MIN_PRICE, ranked_plan
from policies.placement.rwgp import (
    PATIENCE_MAX_WAIT_S,
    STATE_KEY,
    TypeRoom,
    learn_from,
    observations_of,
    type_room,
    waits_for_faster,
)
from policies.profiles import load_profiles
from policies.protocols import Context, NoParams, Ordering, PlacementOutcome
from policies.registry import build_registry
from training.dl2.episodes import EpisodeSpec

AGENTS = ("ordering", "placement")
MACHINE_OBS = 4


@dataclass
class RoundInputs:
    """What both agents saw in one round (kept by trainers to score actions again)."""

    jobs: np.ndarray
    """[J, F] features of the round's schedulable jobs."""
    waiting: np.ndarray
    """[J] bool: jobs the order decides (not running)."""
    cluster: np.ndarray
    mu: np.ndarray
    sigma: np.ndarray
    price: np.ndarray
    free: np.ndarray


class _ActionOrdering:
    name: ClassVar[str] = "dual_agent"
    version: ClassVar[str] = "train"
    stage: ClassVar[Stage] = Stage.ORDERING
    summary: ClassVar[str] = "The ordering agent's action of this step."
    source: ClassVar[str] = "training"
    Params: ClassVar[type[BaseModel]] = NoParams

    def __init__(self) -> None:
        self.scores: dict[str, float] = {}

    def order(self, ctx: Context, jobs: Sequence[Job]) -> Ordering:
        # Jobs beyond the observed slots come last.
        scores = np.array([self.scores.get(job.id, -1e9) for job in jobs])
        return Ordering(job_ids=ranked_ids(ctx, jobs, scores), backfill=True)


class _ActionPlacement:
    name: ClassVar[str] = "rwgp"
    version: ClassVar[str] = "train"
    stage: ClassVar[Stage] = Stage.PLACEMENT
    summary: ClassVar[str] = "The placement agent's action of this step."
    source: ClassVar[str] = "training"
    Params: ClassVar[type[BaseModel]] = NoParams

    def __init__(self, room: TypeRoom, spread_penalty: float = 0.85) -> None:
        self.preference: dict[str, float] = {}
        self.mu: dict[str, float] = {}
        """The GP's posterior mean log speed factor per machine, this round."""
        self.patience = 0.0
        self.room = room
        self.spread_penalty = spread_penalty

    def place(self, ctx: Context, job: Job, workers: int, free: FreeCapacity) -> PlacementOutcome:
        table = {
            node_id: math.log(max(job.gpu_type_speed.get(free.node(node_id).gpu_type, 1.0), 1e-6))
            for node_id, _ in free.candidate_nodes(job)
        }
        score = {node_id: t + self.preference.get(node_id, 0.0) for node_id, t in table.items()}
        plan = ranked_plan(job, workers, free, score, self.spread_penalty)
        if isinstance(plan, str):
            return PlacementOutcome(reason=plan)
        wait = waits_for_faster(
            job,
            workers,
            plan_log_speed=min(table[n] + self.mu.get(n, 0.0) for n, _ in plan),
            room=self.room,
            patience=self.patience,
            waited_s=ctx.snapshot.now - job.submit_time,
            max_wait_s=PATIENCE_MAX_WAIT_S,
        )
        if wait is not None:
            return PlacementOutcome(reason=wait)
        return PlacementOutcome(assignments=assignments_for(free, job, plan))


class DualAgentEnv(ParallelEnv):  # type: ignore[misc]
    """One episode of the simulator, stepped one scheduling round at a time."""

    metadata: ClassVar[dict[str, Any]] = {"name": "arbiter_dual_agent_v0"}

    def __init__(
        self,
        spec: EpisodeSpec,
        gp_model: DualAgentModel,
        *,
        max_jobs: int = 128,
        jct_weight: float = 2.0,
    ) -> None:
        self.spec = spec
        self.gp_model = gp_model
        self.max_jobs = max_jobs
        self.jct_weight = jct_weight
        self.possible_agents = list(AGENTS)
        self.agents: list[str] = []
        self._sim = spec.simulation()
        self._nodes = [n for n in self._sim.base_nodes if n.schedulable_for_training]
        self._index = {n.id: i for i, n in enumerate(self._nodes)}
        self._session = GpSession(self._nodes)
        self._ordering = _ActionOrdering()
        self._placement = _ActionPlacement(type_room(self._nodes))
        registry = build_registry()
        built = Pipeline.build(load_profiles(registry)["dual-agent"], registry)
        # No fallback: training must see a fault, never a heuristic's answer.
        self._pipeline = replace(
            built, ordering=self._ordering, placement=self._placement, fallbacks=Fallbacks()
        )
        self.state: dict[str, JsonValue] = {}
        self.snapshot: Snapshot | None = None
        self.inputs: RoundInputs | None = None
        self.fee = 0.0
        self.job_hours = 0.0
        self._job_ids: list[str] = []
        self._posterior: tuple[object, Posterior] | None = None
        n = len(self._nodes)
        self._observation_spaces = {
            "ordering": spaces.Dict(
                {
                    "jobs": spaces.Box(-np.inf, np.inf, (max_jobs, JOB_FEATURES), np.float32),
                    "mask": spaces.MultiBinary(max_jobs),
                    "cluster": spaces.Box(-np.inf, np.inf, (CLUSTER_FEATURES,), np.float32),
                }
            ),
            "placement": spaces.Box(-np.inf, np.inf, (n, MACHINE_OBS), np.float32),
        }
        self._action_spaces = {
            "ordering": spaces.Box(-np.inf, np.inf, (max_jobs,), np.float32),
            "placement": spaces.Box(-np.inf, np.inf, (n + 1,), np.float32),
        }

    # -- PettingZoo API -----------------------------------------------------------------------
    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self._action_spaces[agent]

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
        self.agents = list(AGENTS)
        self.state = {}
        self._posterior = None
        self.fee = 0.0
        self.job_hours = 0.0
        self.snapshot = self._sim.reset(seed=self.spec.seed if seed is None else seed)
        self._observe_feedback()
        return self._observations(), {a: {} for a in self.agents}

    def step(
        self, actions: dict[str, Any]
    ) -> tuple[
        dict[str, Any],
        dict[str, float],
        dict[str, bool],
        dict[str, bool],
        dict[str, dict[str, Any]],
    ]:
        snapshot = self.snapshot
        if snapshot is None:
            raise RuntimeError("the episode is over: call reset()")
        ordering = np.asarray(actions["ordering"], dtype=np.float64)
        self._ordering.scores = {
            job_id: float(ordering[i]) for i, job_id in enumerate(self._job_ids[: self.max_jobs])
        }
        preference = np.asarray(actions["placement"], dtype=np.float64)
        self._placement.preference = {n.id: float(preference[i]) for i, n in enumerate(self._nodes)}
        # The last entry is the patience's log-odds (clipped: exp must stay finite).
        self._placement.patience = 1.0 / (1.0 + math.exp(-float(np.clip(preference[-1], -60, 60))))
        # The environment applies the decision; its reasons are never read.
        outcome = self._pipeline.run(
            snapshot,
            state=self.state,
            seed=self._sim.round_seed(),
            decision_id="train",
            explain=False,
        )
        following, done = self._sim.step(outcome.decision)
        reward = self._reward(snapshot, following)
        self.snapshot = following
        if not done:
            self._observe_feedback()
        observations = self._observations() if not done else {}
        rewards = dict.fromkeys(AGENTS, reward)
        terminations = dict.fromkeys(AGENTS, done)
        truncations = dict.fromkeys(AGENTS, False)
        if done:
            self.agents = []
        return observations, rewards, terminations, truncations, {a: {} for a in AGENTS}

    def close(self) -> None:
        self.snapshot = None

    # -- internals ----------------------------------------------------------------------------
    def result(self) -> Any:
        return self._sim.result()

    def posterior(self) -> Posterior:
        return posterior(
            self._nodes,
            observations_of(self.state.get(STATE_KEY)),
            self.gp_model.gp_hyper(),
            self._session,
        )

    def _observe_feedback(self) -> None:
        seen = self._sim.throughput_observations()
        if seen:
            self.state[STATE_KEY] = learn_from(self.state.get(STATE_KEY), seen)

    def _reward(self, before: Snapshot, after: Snapshot | None) -> float:
        """−(fee + jct_weight × job-hours) until the next round (the shared reward)."""
        end = after.now if after is not None else before.now
        hours = max(0.0, end - before.now) / 3600.0
        prices = {n.id: n.price_per_gpu_hour for n in before.nodes}
        fee = 0.0
        in_system = 0
        for job in after.jobs if after is not None else ():
            in_system += 1
            if job.state is JobState.RUNNING:
                fee += sum(prices.get(a.node_id, 0.0) * len(a.gpu_indices) for a in job.placement)
        self.fee += fee * hours
        self.job_hours += in_system * hours
        return -(fee * hours + self.jct_weight * in_system * hours) / 100.0

    def _observations(self) -> dict[str, Any]:
        snapshot = self.snapshot
        assert snapshot is not None
        jobs = list(snapshot.jobs)
        self._job_ids = [job.id for job in jobs]
        features = job_features(snapshot, jobs)
        cluster = cluster_features(snapshot, jobs)
        post = self.posterior()
        used: dict[str, int] = {}
        for job in snapshot.jobs:
            for a in job.placement:
                used[a.node_id] = used.get(a.node_id, 0) + len(a.gpu_indices)
        price = np.array([max(n.price_per_gpu_hour, MIN_PRICE) for n in self._nodes])
        free = np.array([(n.gpus - used.get(n.id, 0)) / max(1, n.gpus) for n in self._nodes])
        self._placement.mu = {n.id: float(post.mean[i]) for i, n in enumerate(self._nodes)}
        self.inputs = RoundInputs(
            jobs=features,
            waiting=np.array([j.state is not JobState.RUNNING for j in jobs]),
            cluster=cluster,
            mu=post.mean,
            sigma=post.std,
            price=price,
            free=free,
        )
        padded = np.zeros((self.max_jobs, JOB_FEATURES), dtype=np.float32)
        mask = np.zeros(self.max_jobs, dtype=np.int8)
        n = min(len(jobs), self.max_jobs)
        padded[:n] = features[:n]
        mask[:n] = 1
        machines = np.stack([post.mean, post.std, np.log(price), free], axis=1).astype(np.float32)
        return {
            "ordering": {"jobs": padded, "mask": mask, "cluster": cluster},
            "placement": machines,
        }
