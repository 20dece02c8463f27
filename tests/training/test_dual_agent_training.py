"""Training the dual agent on tiny budgets: the PettingZoo environment, MAPPO, the GP fit."""

from __future__ import annotations

import numpy as np
import torch
from pettingzoo.test import parallel_api_test

from policies.learned.dual_agent.network import DualAgentModel
from training.dual_agent.env import DualAgentEnv
from training.dual_agent.episodes import window
from training.dual_agent.evaluation import decider
from training.dual_agent.gp_fit import fit_gp
from training.dual_agent.mappo import MappoArgs, train_mappo

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
