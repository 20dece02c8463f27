"""Scoring dual-agent models (and any profile) on held-out episodes: fee, JCT, the objective.

A model is served exactly as the `dual-agent` profile serves it (its fallbacks
included) through :class:`simulator.deciders.EngineDecider`, which feeds the
GP the simulator's throughput observations between rounds. The objective is the
shared reward's: fee plus `jct_weight` dollars per hour of every job's
completion time, summed over the episode; lower is better.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from policies.learned.dual_agent.network import DualAgentModel
from policies.ordering.dual_agent import DualAgentOrdering
from policies.placement.rwgp import RwgpParams, RwgpPlacement
from policies.profiles import Profile, load_profiles
from policies.registry import build_registry
from simulator.deciders import EngineDecider
from training.dl2.episodes import EpisodeSpec


@dataclass(frozen=True)
class Score:
    fee_usd: float
    avg_jct_s: float
    objective: float
    fallbacks: int


def decider(
    model: DualAgentModel | None = None,
    *,
    profile: str | Profile = "dual-agent",
    use_gp: bool = True,
) -> EngineDecider:
    """A decider of `profile`; with `model`, its dual-agent policies serve that model."""
    registry = build_registry()
    chosen = load_profiles(registry)[profile] if isinstance(profile, str) else profile
    engine = EngineDecider(chosen, registry)
    pipeline = engine.pipeline
    ordering, placement = pipeline.ordering, pipeline.placement
    if model is not None and isinstance(ordering, DualAgentOrdering):
        ordering = DualAgentOrdering.with_model(model)
    if isinstance(placement, RwgpPlacement):
        params = RwgpParams(use_gp=use_gp)
        if model is not None:
            placement = RwgpPlacement.with_model(model, params=params)
        elif not use_gp:
            placement = RwgpPlacement(params)
    engine.pipeline = dataclasses.replace(pipeline, ordering=ordering, placement=placement)
    return engine


def score(engine: EngineDecider, episode: EpisodeSpec, jct_weight: float) -> Score:
    engine.state = {}
    result = episode.simulation().run(engine)
    metrics = result.metrics
    jobs = int(metrics["jobs_completed"])
    fee = float(metrics["cost_usd"])
    jct = float(metrics["avg_jct_s"])
    return Score(
        fee_usd=fee,
        avg_jct_s=jct,
        objective=fee + jct_weight * jct * jobs / 3600.0,
        fallbacks=0,
    )


def means(scores: Sequence[Score]) -> tuple[float, float, float]:
    """(mean objective, mean fee, mean average JCT) of played episodes."""
    n = max(1, len(scores))
    return (
        sum(s.objective for s in scores) / n,
        sum(s.fee_usd for s in scores) / n,
        sum(s.avg_jct_s for s in scores) / n,
    )
