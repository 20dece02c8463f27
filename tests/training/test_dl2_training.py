"""DL2 training on tiny budgets: rewards, imitation, PPO determinism, evaluation."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import orjson
import pytest
from msgspec.structs import replace

from policies.common.pool import FloorParams
from policies.decision import Decision
from policies.engine import Pipeline
from policies.learned.dl2.features import Allocation, Dl2Config
from policies.learned.dl2.network import Dl2Model
from policies.model import ScalingRule, Snapshot, encode
from policies.registry import build_registry
from simulator.metrics import JobRecord
from simulator.sweep import InProcess, ProcessPool, RayCluster, Runner
from tests.policies.builders import job, node, running, snap
from training.dl2.episodes import EpisodeSpec
from training.dl2.evaluation import Score, compare, score
from training.dl2.imitation import (
    ImitationArgs,
    demonstrations,
    imitate,
    simulated_records,
    teacher_action,
    teacher_profile,
)
from training.dl2.reinforce import PpoArgs, train_ppo
from training.dl2.rollout import (
    discounted_returns,
    play_episode,
    progress_reward,
    time_in_system_rewards,
)

CONFIG = Dl2Config(window=4, families=("resnet50",), hidden=(16, 8))
REGISTRY = build_registry()

REALLOCATING = FloorParams(keep_running=False)


@pytest.fixture(scope="module")
def episode(tmp_path_factory: pytest.TempPathFactory) -> EpisodeSpec:
    """Ten jobs on two 4-GPU nodes: enough contention for scaling to matter, < 1 s to run."""
    folder = tmp_path_factory.mktemp("episode")
    rows = ["job_id,submit_time_s,num_gpus,duration_s"]
    shapes = [(1, 900), (2, 1800), (1, 600), (4, 1200), (2, 300), (1, 2400), (2, 900)]
    shapes += [(1, 1200), (2, 600), (1, 300)]
    for i, (gpus, duration) in enumerate(shapes):
        rows.append(f"t{i},{i * 120},{gpus},{duration}")
    trace = folder / "tiny.csv"
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
    cluster = folder / "tiny.json"
    group = {
        "count": 2,
        "gpus": 4,
        "gpu_type": "V100",
        "gpu_memory_gb": 32,
        "cpus": 64,
        "memory_gb": 512,
        "pool": "training",
        "rack_size": 16,
        "price_per_gpu_hour": 3.0,
    }
    cluster.write_text(json.dumps({"name": "tiny", "node_groups": [group]}), encoding="utf-8")
    return EpisodeSpec(
        trace=str(trace),
        cluster=str(cluster),
        jobs=10,
        elastic_fraction=1.0,
        ps_fraction=0.5,
        seed=1,
    )


def _model_config(spec: EpisodeSpec) -> Dl2Config:
    families = tuple(sorted({j.family for j in spec.job_specs()}))
    return CONFIG.model_copy(update={"families": families})


# -- rewards ------------------------------------------------------------------------------------
def test_progress_reward_sums_fractions_of_total_work_and_counts_finished_jobs() -> None:
    before = snap(
        [node("n0")],
        [
            running("a", {"n0": (0,)}, total_work=100.0, work_done=20.0),
            running("b", {"n0": (1,)}, total_work=50.0, work_done=40.0),
            job("c"),
        ],
    )
    after = snap(
        [node("n0")],
        [running("a", {"n0": (0,)}, total_work=100.0, work_done=50.0), job("c")],
    )
    assert progress_reward(before, after) == pytest.approx(0.3 + 0.2)
    assert progress_reward(before, None) == pytest.approx(0.8 + 0.2)


def test_time_in_system_rewards_charge_each_round_the_hours_its_jobs_spent_until_the_next() -> None:
    def record(submit: float, finish: float | None) -> JobRecord:
        return JobRecord(
            index=0,
            job_id="j",
            tenant="t",
            family="resnet50",
            gpus=1,
            submit_s=submit,
            recorded_duration_s=1.0,
            first_start_s=submit,
            finish_s=finish,
            run_s=0.0,
            gpu_s=0.0,
            preemptions=0,
            restarts=0,
            cost_usd=0.0,
            status="running" if finish is None else "completed",
        )

    # Rounds at 0 and 3600 s; the episode ends at 9000 s. One job from 0 to 1800 s, one
    # arriving between the rounds and finishing after the second, one never finishing.
    jobs = [record(0.0, 1800.0), record(1800.0, 5400.0), record(3600.0, None)]
    rewards = time_in_system_rewards([0.0, 3600.0], jobs, 9000.0)

    assert rewards == pytest.approx([-(0.5 + 0.5), -(0.5 + 1.5)])
    assert time_in_system_rewards([], jobs, 9000.0) == []


def test_time_in_system_rewards_of_an_episode_sum_to_minus_its_jobs_summed_jct(
    episode: EpisodeSpec,
) -> None:
    model = Dl2Model.initial(_model_config(episode), seed=3)

    played = play_episode(episode, model, np.random.default_rng(0), reward="time-in-system")

    assert played.result is not None
    metrics = played.result.metrics
    summed_jct_h = float(metrics["avg_jct_s"]) * int(metrics["jobs_completed"]) / 3600.0
    assert int(metrics["jobs_completed"]) == episode.jobs
    assert sum(played.rewards) == pytest.approx(-summed_jct_h, rel=1e-9)
    # The same actions as with the paper's reward: only what is rewarded differs.
    progress = play_episode(episode, model, np.random.default_rng(0))
    assert [s.action for s in progress.steps] == [s.action for s in played.steps]


def test_ppo_refuses_an_unknown_reward() -> None:
    with pytest.raises(ValueError, match="reward 'speed'"):
        PpoArgs(reward="speed")  # type: ignore[arg-type]


def test_returns_discount_by_simulated_time() -> None:
    returns = discounted_returns([1.0, 1.0, 1.0], [0.0, 3600.0, 3600.0], horizon_s=3600.0)
    assert returns[2] == pytest.approx(1.0)
    assert returns[1] == pytest.approx(2.0)
    assert returns[0] == pytest.approx(1.0 + 2.0 / math.e)


# -- imitation ----------------------------------------------------------------------------------
def _contended() -> Snapshot:
    return snap(
        [node("n0", gpus=8)],
        [
            job("a", workers=2, min_workers=1, max_workers=4, model="resnet50"),
            job(
                "b",
                workers=2,
                min_workers=1,
                max_workers=8,
                scaling_rule=ScalingRule.POWER_OF_TWO,
                ps=2,
                max_ps=4,
            ),
            job("c", workers=1),
        ],
    )


def test_the_teacher_walks_from_the_floor_to_the_recorded_allocation() -> None:
    snapshot = _contended()
    targets = {"a": (3, 0), "b": (4, 2), "c": (1, 0)}
    allocation = Allocation(snapshot, list(snapshot.jobs), CONFIG)
    for _ in range(20):
        action = teacher_action(allocation, targets)
        if action == CONFIG.stop_action:
            break
        allocation.apply(action)
    assert {j: allocation.allocation(j) for j in targets} == targets


def test_demonstrations_read_decision_log_rows_as_json() -> None:
    snapshot = _contended()
    pipeline = Pipeline.build(teacher_profile("drf", REGISTRY), REGISTRY)
    decision = pipeline.decide(snapshot, decision_id="d")
    rows = [(orjson.loads(encode(snapshot)), orjson.loads(encode(decision)))]
    from_json = demonstrations(rows, CONFIG)
    from_models = demonstrations([(snapshot, decision)], CONFIG)
    assert len(from_json) > 1
    assert from_json.actions[-1] == CONFIG.stop_action
    np.testing.assert_array_equal(from_json.states, from_models.states)
    np.testing.assert_array_equal(from_json.actions, from_models.actions)
    no_scaling = replace(decision, scaling=())
    assert len(demonstrations([(snapshot, no_scaling)], CONFIG)) == 0


def test_imitation_learns_the_teachers_actions(episode: EpisodeSpec) -> None:
    config = _model_config(episode)
    records: list[tuple[Snapshot, Decision]] = list(
        simulated_records([episode], teacher_profile("drf", REGISTRY), REGISTRY)
    )
    data = demonstrations(records, config)
    assert len(data) > 10
    model = Dl2Model.initial(config, seed=0)
    log = imitate(model, data, ImitationArgs(epochs=60, batch_size=32, learning_rate=3e-3))
    assert log[-1]["loss"] < log[0]["loss"]
    assert log[-1]["accuracy"] > 0.8


def test_a_reallocating_teacher_resizes_running_jobs_and_its_pupil_starts_from_the_same_floor(
    episode: EpisodeSpec,
) -> None:
    config = _model_config(episode)
    teacher = teacher_profile("drf", REGISTRY, floor=REALLOCATING)
    assert teacher.scaling.params == {"keep_running": False}
    kept = list(simulated_records([episode], teacher_profile("drf", REGISTRY), REGISTRY))
    records = list(simulated_records([episode], teacher, REGISTRY))

    def resized(rows: list[tuple[Snapshot, Decision]]) -> int:
        """Running jobs whose worker count a decision changed."""
        count = 0
        for snapshot, decision in rows:
            by_id = snapshot.jobs_by_id
            for result in decision.scaling:
                held = by_id[result.job_id]
                if held.placement and result.workers != held.placed_workers:
                    count += 1
        return count

    assert resized(records) > resized(kept)
    # Replayed from the minimum floor, every decision's scaling is reached step by step.
    data = demonstrations(records, config, floor=REALLOCATING)
    assert len(data) > 10
    reached = 0
    for snapshot, decision in records:
        jobs = [snapshot.jobs_by_id[r.job_id] for r in decision.scaling]
        targets = {r.job_id: (r.workers, r.ps) for r in decision.scaling}
        allocation = Allocation(snapshot, jobs, config, floor=REALLOCATING)
        for _ in range(200):
            action = teacher_action(allocation, targets)
            if action == config.stop_action:
                break
            allocation.apply(action)
        for job_id in targets:
            if any(slot.job.id == job_id for slot in allocation.window):
                assert allocation.allocation(job_id)[0] == targets[job_id][0]
                reached += 1
    assert reached > 10


# -- RL -----------------------------------------------------------------------------------------
def test_ppo_is_deterministic_for_a_seed_and_logs_its_diagnostics(episode: EpisodeSpec) -> None:
    config = _model_config(episode)
    args = PpoArgs(seed=3, updates=2, episodes_per_update=1, critic_warmup=1, minibatch_size=32)
    first = Dl2Model.initial(config, seed=0)
    log = train_ppo(first, [episode], args)
    again = Dl2Model.initial(config, seed=0)
    train_ppo(again, [episode], args)
    assert first.to_bytes() == again.to_bytes()
    assert first.to_bytes() != Dl2Model.initial(config, seed=0).to_bytes(), "it learned"
    assert len(log) == 2
    for row in log:
        for key in (
            "approx_kl",
            "clipfrac",
            "entropy",
            "explained_variance",
            "mean_reward",
            "policy_loss",
            "value_loss",
            "avg_jct_s",
        ):
            assert math.isfinite(row[key]), (key, row)
    other = Dl2Model.initial(config, seed=0)
    train_ppo(other, [episode], PpoArgs(seed=4, updates=2, episodes_per_update=1, critic_warmup=1))
    assert other.to_bytes() != first.to_bytes()


def test_ppo_gives_the_same_weights_and_diagnostics_in_process_on_processes_and_on_ray(
    episode: EpisodeSpec,
) -> None:
    """Each episode carries its own seed, so where the episodes play changes nothing."""
    config = _model_config(episode)
    episodes = [episode, dataclasses.replace(episode, jobs=6, seed=2)]
    args = PpoArgs(seed=5, updates=2, episodes_per_update=2, critic_warmup=1, minibatch_size=32)

    def train(runner: Runner) -> tuple[bytes, list[dict[str, float]], Score]:
        model = Dl2Model.initial(config, seed=0)
        with runner.started():
            log = train_ppo(model, episodes, args, runner=runner)
            # Validation and the verdict score the greedy policy on the same runner.
            scored = score(model, episodes, runner=runner)
        wall = {"rollout_s", "seconds"}
        diagnostics = [{k: v for k, v in row.items() if k not in wall} for row in log]
        return model.to_bytes(), diagnostics, scored

    in_process = train(InProcess())
    on_processes = train(ProcessPool(2))
    on_ray = train(RayCluster("local", num_cpus=2))

    assert on_processes == in_process
    assert on_ray == in_process
    weights, diagnostics, scored = in_process
    assert weights != Dl2Model.initial(config, seed=0).to_bytes(), "it learned"
    assert [row["update"] for row in diagnostics] == [0.0, 1.0]
    assert diagnostics[1]["approx_kl"] != 0.0, "the second update moved the policy"
    assert [e.jobs_completed for e in scored.episodes] == [10, 6]


# -- evaluation ---------------------------------------------------------------------------------
def test_compare_scores_a_candidate_against_a_heuristic(episode: EpisodeSpec) -> None:
    candidate = Dl2Model.initial(_model_config(episode), seed=0)
    comparison = compare(candidate, teacher_profile("drf", REGISTRY), [episode])
    metrics = comparison.metrics()
    assert metrics["episodes"] == 1
    assert isinstance(metrics["candidate_mean_avg_jct_s"], float)
    assert metrics["candidate_mean_avg_jct_s"] > 0
    assert comparison.candidate.fallbacks == 0
    assert comparison.candidate_wins == (
        comparison.candidate.mean_avg_jct_s < comparison.incumbent.mean_avg_jct_s
    )
    assert score("drf", [episode]).mean_avg_jct_s > 0


def test_episode_specs_cut_windows_and_scale_the_cluster(episode: EpisodeSpec) -> None:
    jobs = EpisodeSpec(trace=episode.trace, cluster=episode.cluster, start=3, jobs=4).job_specs()
    assert [j.id for j in jobs] == ["t3", "t4", "t5", "t6"]
    assert [j.index for j in jobs] == [0, 1, 2, 3]
    capped = EpisodeSpec(trace=episode.trace, cluster=episode.cluster, max_duration_s=500.0)
    assert max(j.duration_s for j in capped.job_specs()) == 500.0
    half = EpisodeSpec(trace=episode.trace, cluster=episode.cluster, cluster_fraction=0.5)
    assert half.cluster_spec().training_gpus() == 4
    assert Path(episode.trace).exists()


def test_an_episodes_estimate_error_moves_the_estimates_and_nothing_else(
    episode: EpisodeSpec,
) -> None:
    exact = episode.job_specs()
    off = dataclasses.replace(episode, estimate_error=1.0).job_specs()

    assert [j.estimate_s for j in exact] == [j.duration_s for j in exact]
    assert all(a.estimate_s != b.estimate_s for a, b in zip(exact, off, strict=True))
    assert [dataclasses.replace(j, estimate_s=0.0) for j in off] == [
        dataclasses.replace(j, estimate_s=0.0) for j in exact
    ]
