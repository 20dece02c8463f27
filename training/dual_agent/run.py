"""One dual-agent training run: MAPPO, the GP fit, the attitude search, the verdict.

The verdict compares the candidate with the incumbent on held-out windows by the
attitude search's criterion (`DualAgentBudget.attitude_fit_criterion`): lower wins.

The trainer's and the script's (`make dual-agent-model`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from policies.learned.dual_agent.network import DualAgentModel
from policies.learned.dual_agent.shipped import shipped_model
from training.dl2.reinforce import one_thread
from training.dual_agent.attitude_fit import Judge, attitude, fit_attitude, fit_runs
from training.dual_agent.episodes import held_out_episodes, training_episodes
from training.dual_agent.evaluation import decider, means
from training.dual_agent.gp_fit import fit_gp
from training.dual_agent.mappo import MappoArgs, train_mappo
from training.dual_agent.trainer import DualAgentBudget
from training.registry import Progress, Start


@dataclass
class RunResult:
    model: DualAgentModel
    wins: bool
    held_out: int
    metrics: dict[str, Any] = field(default_factory=dict)
    log: list[dict[str, float]] = field(default_factory=list)
    attitude_log: list[dict[str, float]] = field(default_factory=list)


def train_dual_agent(
    incumbent_weights: bytes | None,
    budget: DualAgentBudget,
    *,
    seed: int = 0,
    start: Start = "incumbent",
    on_progress: Progress | None = None,
    train_ordering: bool = True,
    train_placement: bool = True,
    fixed_ordering: str = "model",
) -> RunResult:
    """A candidate from the incumbent's weights (or fresh ones), judged on held-out episodes."""
    report = on_progress or (lambda _stage, _fraction: None)
    incumbent = (
        DualAgentModel.from_bytes(incumbent_weights)
        if incumbent_weights is not None
        else shipped_model().model
    )
    candidate = (
        DualAgentModel.from_bytes(incumbent.to_bytes())
        if start == "incumbent"
        else DualAgentModel.initial(incumbent.config, seed=seed)
    )
    timings: dict[str, float] = {}
    with one_thread():
        clock = time.perf_counter()
        report("rl", 0.0)
        episodes = training_episodes(budget.jobs)
        log = train_mappo(
            candidate,
            episodes,
            MappoArgs(
                seed=seed,
                updates=budget.updates,
                episodes_per_update=budget.episodes_per_update,
                epochs=budget.epochs,
                jct_weight=budget.jct_weight,
                train_ordering=train_ordering,
                train_placement=train_placement,
                fixed_ordering=fixed_ordering,
            ),
            on_update=lambda row: report("rl", (row["update"] + 1) / max(1, budget.updates)),
        )
        report("rl", 1.0)
        timings["rl"] = time.perf_counter() - clock

        clock = time.perf_counter()
        report("gp", 0.0)
        data = []
        for episode in episodes[: budget.gp_fit_episodes]:
            engine = decider(candidate)
            sim = episode.simulation()
            sim.run(engine)
            nodes = [n for n in sim.base_nodes if n.schedulable_for_training]
            data.append((nodes, engine.state.get("rwgp")))
        gp_losses = fit_gp(candidate, data, steps=budget.gp_fit_steps) if data else []
        report("gp", 1.0)
        timings["gp"] = time.perf_counter() - clock

        clock = time.perf_counter()
        report("attitude", 0.0)
        before = attitude(candidate)
        # Trained one agent alone (the ablation), the search is left out: it serves the
        # model's own ordering network, which a placement-alone run never trained, and it
        # would move the placement head of an ordering-alone run.
        passes = budget.attitude_fit_passes if train_ordering and train_placement else 0
        runs = fit_runs(episodes[: budget.attitude_fit_episodes], budget.attitude_fit_repetitions)
        attitude_log = (
            fit_attitude(
                candidate,
                Judge(budget.attitude_fit_criterion, runs, budget.jct_weight),
                passes=passes,
                on_step=lambda fraction: report("attitude", fraction),
            )
            if passes
            else []
        )
        report("attitude", 1.0)
        timings["attitude"] = time.perf_counter() - clock

        clock = time.perf_counter()
        report("evaluation", 0.0)
        held_out = held_out_episodes(budget.jobs)[: budget.held_out_episodes]
        # The verdict is the attitude search's own criterion, on held-out windows: a
        # candidate is judged by what shaped it (the objective's figures are kept too).
        verdict = Judge(budget.attitude_fit_criterion, held_out, budget.jct_weight)
        cand_played, inc_played = verdict.scores(candidate), verdict.scores(incumbent)
        cand, inc = means(cand_played), means(inc_played)
        cand_value, inc_value = verdict.value(cand_played), verdict.value(inc_played)
        report("evaluation", 1.0)
        timings["evaluation"] = time.perf_counter() - clock
    metrics: dict[str, Any] = {
        "candidate_objective": round(cand[0], 3),
        "candidate_fee_usd": round(cand[1], 3),
        "candidate_avg_jct_s": round(cand[2], 3),
        "incumbent_objective": round(inc[0], 3),
        "incumbent_fee_usd": round(inc[1], 3),
        "incumbent_avg_jct_s": round(inc[2], 3),
        "verdict_criterion": budget.attitude_fit_criterion,
        "candidate_criterion": round(cand_value, 4),
        "incumbent_criterion": round(inc_value, 4),
        "held_out_episodes": len(held_out),
        "mappo_updates": len(log),
        "gp_fit_loss": round(gp_losses[-1], 5) if gp_losses else None,
        **{f"mappo_{k}": round(v, 4) for k, v in before.items()},
        "attitude_fit_criterion": budget.attitude_fit_criterion,
        "attitude_fit_value": (round(attitude_log[-1]["criterion"], 4) if attitude_log else None),
        "risk": round(float(candidate.placement.risk.detach()[0]), 4),
        "time_value_usd_per_gpu_h": round(float(candidate.placement.time_value.detach()[0]), 4),
        "patience": round(float(candidate.placement.patience.detach()[0]), 4),
        **{f"{stage}_s": round(seconds, 3) for stage, seconds in timings.items()},
    }
    return RunResult(
        model=candidate,
        wins=cand_value < inc_value,
        held_out=len(held_out),
        metrics=metrics,
        log=log,
        attitude_log=attitude_log,
    )
