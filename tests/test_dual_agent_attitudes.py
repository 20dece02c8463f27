"""The attitude table: each attitude served on the same runs as both baselines."""

from __future__ import annotations

import pytest

from evidence.dual_agent_attitudes import margins, runs
from policies.learned.dual_agent.network import DualAgentModel
from training.dual_agent.attitude_fit import attitude
from training.dual_agent.episodes import training_episodes, window


def test_each_attitude_gets_a_row_and_the_model_keeps_its_own() -> None:
    model = DualAgentModel.initial()
    own = attitude(model)
    episodes = [window(start=s, jobs=10, seed=7, cluster_fraction=0.12) for s in (0, 10)]

    table = margins(model, [(None, None, None), (0.5, 2.0, -1.0)], episodes)

    assert len(table) == 2 + 2
    assert table[2].startswith(f"| {own['patience']:.2f} | {own['time_value']:.2f} |")
    assert table[3].startswith("| 0.50 | 2.00 | -1.00 |")
    assert attitude(model) == pytest.approx(own)


def test_the_runs_are_the_training_windows_at_the_seeds_asked() -> None:
    played = runs(offset=20_000, step=100, repetitions=2, jobs=12)
    own = [episode.seed for episode in training_episodes(12)]

    assert [episode.seed for episode in played] == [
        *(seed + 20_000 for seed in own),
        *(seed + 20_100 for seed in own),
    ]
