"""Training the dual agent on tiny budgets: the PettingZoo environment, MAPPO, the GP fit."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch
from pettingzoo.test import parallel_api_test

from policies.learned.dual_agent.network import DualAgentModel
from simulator.perf import load_perf_tables
from training.dual_agent.attitude_fit import (
    GRIDS,
    SEED_OFFSET,
    CriterionName,
    Judge,
    attitude,
    fit_attitude,
    fit_runs,
    paired_margin,
    play,
    set_attitude,
    share_margin,
)
from training.dual_agent.env import DualAgentEnv
from training.dual_agent.episodes import (
    RACK_SHARE,
    held_out_episodes,
    second_held_out_episodes,
    training_episodes,
    window,
)
from training.dual_agent.evaluation import decider
from training.dual_agent.gp_fit import fit_gp
from training.dual_agent.mappo import (
    ATTAINED,
    WAITING,
    MappoArgs,
    least_attained_first,
    train_mappo,
)
from training.dual_agent.run import train_dual_agent
from training.dual_agent.trainer import DualAgentBudget

TINY = window(start=0, jobs=12, seed=3, cluster_fraction=0.12)
"""One machine of each GPU type: jobs queue, so both agents have choices."""


def test_the_environment_follows_the_pettingzoo_parallel_api() -> None:
    env = DualAgentEnv(TINY, DualAgentModel.initial())

    parallel_api_test(env, num_cycles=20)


def test_both_agents_get_the_shared_reward_and_the_episode_ends() -> None:
    env = DualAgentEnv(TINY, DualAgentModel.initial())
    env.reset()
    rounds = 0
    done = False
    while not done:
        actions = {agent: env.action_space(agent).sample() for agent in env.agents}
        _, rewards, terminations, _, _ = env.step(actions)
        assert rewards["ordering"] == rewards["placement"] <= 0.0
        done = terminations["ordering"]
        rounds += 1

    assert env.result().metrics["jobs_completed"] == TINY.jobs
    assert env.fee > 0.0
    assert rounds >= 2


def test_mappo_moves_both_agents_and_is_deterministic_for_a_seed() -> None:
    def run() -> tuple[DualAgentModel, list[dict[str, float]]]:
        model = DualAgentModel.initial(seed=0)
        log = train_mappo(model, [TINY], MappoArgs(seed=4, updates=1, epochs=1))
        return model, log

    first, log = run()
    second, _ = run()
    initial = DualAgentModel.initial(seed=0)

    assert len(log) == 1
    assert first.to_bytes() == second.to_bytes()
    assert not torch.equal(first.placement.risk, initial.placement.risk)
    assert not torch.equal(first.ordering.score2.weight, initial.ordering.score2.weight)


def test_fitting_the_gp_lowers_the_negative_marginal_likelihood() -> None:
    model = DualAgentModel.initial()
    engine = decider(model)
    sim = TINY.simulation()
    sim.run(engine)
    nodes = [n for n in sim.base_nodes if n.schedulable_for_training]

    losses = fit_gp(model, [(nodes, engine.state["rwgp"])], steps=15)

    assert len(losses) == 15
    assert losses[-1] < losses[0]
    assert all(np.isfinite(losses))


def test_training_one_agent_alone_leaves_the_other_unchanged() -> None:
    model = DualAgentModel.initial(seed=0)
    initial = DualAgentModel.initial(seed=0)

    train_mappo(
        model,
        [TINY],
        MappoArgs(
            seed=4, updates=1, epochs=1, train_ordering=False, fixed_ordering="least-attained"
        ),
    )

    assert torch.equal(model.ordering.score2.weight, initial.ordering.score2.weight)
    assert not torch.equal(model.placement.risk, initial.placement.risk)


def test_the_fixed_ordering_serves_least_attained_service_first_then_the_oldest() -> None:
    env = DualAgentEnv(TINY, DualAgentModel.initial())
    env.reset()
    inputs = env.inputs
    assert inputs is not None
    jobs = np.zeros((4, inputs.jobs.shape[1]), dtype=np.float32)
    jobs[:, ATTAINED] = [0.5, 0.0, 0.0, 0.2]
    jobs[:, WAITING] = [0.0, 0.1, 0.9, 0.0]
    shaped = dataclasses.replace(inputs, jobs=jobs, waiting=np.ones(4, dtype=bool))

    order = least_attained_first(shaped, np.arange(4))

    assert order.tolist() == [2, 1, 3, 0]


def test_the_dual_agent_episodes_correlate_machines_within_a_rack() -> None:
    sim = window(start=0, jobs=12, seed=5).simulation()

    assert sim.perf_options.machine_rack_share == RACK_SHARE > 0


def test_held_out_windows_share_no_trace_job_and_no_seed_with_training() -> None:
    training = training_episodes()
    held_out = held_out_episodes()
    trained_on = {job.id for episode in training for job in episode.job_specs()}
    held_jobs = [{job.id for job in episode.job_specs()} for episode in held_out]
    # The evidence plays each held-out window with seeds offset by 100 per repetition.
    evidence_seeds = {episode.seed + 100 * s for episode in held_out for s in range(3)}

    assert len(held_out) == 10
    assert all(len(jobs) == 60 for jobs in held_jobs)
    assert all(not (jobs & trained_on) for jobs in held_jobs)
    assert len(set().union(*held_jobs)) == 60 * len(held_out)
    assert not evidence_seeds & {episode.seed for episode in training}


def test_the_second_held_out_set_shares_no_trace_job_and_no_seed_with_any_earlier_run() -> None:
    second = second_held_out_episodes()
    earlier = training_episodes() + held_out_episodes()
    seen_jobs = {job.id for episode in earlier for job in episode.job_specs()}
    jobs = [{job.id for job in episode.job_specs()} for episode in second]
    # Seeds every earlier run used: training episodes, the attitude search's repetitions,
    # the first held-out set with the evidence's three repetitions.
    training_seeds = {episode.seed for episode in training_episodes()}
    earlier_seeds = (
        training_seeds
        | {seed + SEED_OFFSET * r for seed in training_seeds for r in range(1, 9)}
        | {episode.seed + 100 * s for episode in held_out_episodes() for s in range(3)}
    )
    seeds = {episode.seed + 100 * s for episode in second for s in range(3)}

    assert len(second) == 36
    assert all(len(window_jobs) == 60 for window_jobs in jobs)
    assert len(set().union(*jobs)) == 60 * len(second)
    assert all(not (window_jobs & seen_jobs) for window_jobs in jobs)
    assert len(seeds) == 3 * len(second)
    assert not seeds & earlier_seeds


def test_the_patience_grid_separates_the_lm_and_the_transformer_on_a_k80() -> None:
    # One grid value lets the Transformer start on a K80 (its cheapest type per unit of
    # work) while the LM and the ResNets wait for a faster type.
    tables = load_perf_tables()

    def k80_ratio(family: str) -> float:
        speed = tables.family(family).gpu_speed
        return speed["K80"] / max(speed.values())

    lm, transformer = k80_ratio("lm"), k80_ratio("transformer")
    resnets = max(k80_ratio("resnet18"), k80_ratio("resnet50"))

    assert resnets < lm < transformer
    assert any(lm < value < transformer for value in GRIDS["patience"])


def test_the_attitude_search_keeps_the_best_value_it_served_and_never_raises_the_objective() -> (
    None
):
    model = DualAgentModel.initial()
    runs = fit_runs([window(start=0, jobs=10, seed=7, cluster_fraction=0.12)], repetitions=1)
    judge = Judge("objective", runs, 2.0)
    start = judge(model)
    grids = {"patience": (0.05, 0.5), "time_value": (0.05, 2.0)}

    log = fit_attitude(model, judge, passes=1, grids=grids)

    assert [set(row) - {"pass", "criterion"} for row in log] == [{"patience"}, {"time_value"}]
    assert log[-1]["criterion"] <= start
    assert judge(model) == log[-1]["criterion"]
    assert attitude(model)["risk"] == DualAgentModel.initial().placement.risk.item()


def test_a_paired_margin_counts_standard_errors_of_the_per_run_differences() -> None:
    # Differences 9, 10, 11: mean 10, standard error 1/sqrt(3).
    assert paired_margin([1.0, 2.0, 3.0], [10.0, 12.0, 14.0]) == pytest.approx(10 * 3**0.5)
    assert paired_margin([10.0, 12.0, 14.0], [1.0, 2.0, 3.0]) == pytest.approx(-10 * 3**0.5)
    assert paired_margin([5.0, 5.0], [5.0, 5.0]) == 0.0


@pytest.mark.parametrize("name", ["weakest-margin", "weakest-share"])
def test_a_margin_search_lowers_minus_the_weakest_margin_over_the_baselines(
    name: CriterionName,
) -> None:
    model = DualAgentModel.initial()
    runs = fit_runs(
        [window(start=s, jobs=10, seed=7, cluster_fraction=0.12) for s in (0, 10)],
        repetitions=1,
    )
    judge = Judge(name, runs, 2.0)
    start = judge(model)

    log = fit_attitude(model, judge, passes=1, grids={"patience": (0.05, 0.5)})

    assert not math.isnan(start)
    assert log[-1]["criterion"] <= start
    assert judge(model) == log[-1]["criterion"]


def test_a_share_margin_is_the_baselines_total_less_ours_as_a_share_of_theirs() -> None:
    assert share_margin([1.0, 2.0, 3.0], [10.0, 12.0, 14.0]) == pytest.approx(30 / 36)
    assert share_margin([10.0, 10.0], [5.0, 5.0]) == pytest.approx(-1.0)
    assert share_margin([5.0, 5.0], [5.0, 5.0]) == 0.0


def test_an_attitude_value_set_is_the_value_served() -> None:
    model = DualAgentModel.initial()

    for name, value in {"patience": 0.35, "time_value": 1.5, "risk": -0.5}.items():
        set_attitude(model, name, value)

    assert attitude(model) == pytest.approx({"patience": 0.35, "time_value": 1.5, "risk": -0.5})


def test_a_baseline_judged_against_itself_has_no_margin_to_spare() -> None:
    runs = fit_runs([window(start=0, jobs=10, seed=7, cluster_fraction=0.12)], repetitions=1)
    judge = Judge("weakest-share", runs, 2.0)
    tiresias = play(decider(profile="tiresias"), runs, 2.0)

    # Its margins against itself are 0, so minus the weakest of four is at least 0.
    assert judge.value(tiresias) >= 0.0
    assert Judge("objective", runs, 2.0).value(tiresias) == pytest.approx(
        sum(s.objective for s in tiresias) / len(tiresias)
    )


@pytest.mark.parametrize("name", ["objective", "weakest-share"])
def test_the_verdict_compares_candidate_and_incumbent_by_the_searchs_criterion(
    name: CriterionName,
) -> None:
    budget = DualAgentBudget(
        updates=0,
        jobs=8,
        held_out_episodes=1,
        gp_fit_episodes=0,
        attitude_fit_passes=1,
        attitude_fit_episodes=1,
        attitude_fit_repetitions=1,
        attitude_fit_criterion=name,
    )
    result = train_dual_agent(None, budget, seed=0, start="scratch")

    metrics = result.metrics
    assert metrics["verdict_criterion"] == name
    assert result.wins == (metrics["candidate_criterion"] < metrics["incumbent_criterion"])
    held_out = held_out_episodes(budget.jobs)[:1]
    judge = Judge(name, held_out, budget.jct_weight)
    assert judge(result.model) == pytest.approx(metrics["candidate_criterion"], abs=1e-4)
