"""The retraining pipeline on a tiny budget: stages, verdict, metrics, RL's episodes, refusals."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from msgspec.structs import replace

from policies.common.pool import DEFAULT_FLOOR, FloorParams
from policies.learned.dl2.features import Dl2Config
from policies.learned.dl2.network import Dl2Model
from policies.learned.dl2.shipped import shipped_model
from policies.model import to_builtins
from policies.registry import build_registry
from simulator.deciders import EngineDecider
from training.dl2.episodes import EpisodeSpec, ServedSetting
from training.dl2.evaluation import score
from training.dl2.imitation import demonstrations, simulated_records, teacher_profile
from training.dl2.logged import FINISHED, logged_episodes
from training.dl2.retrain import (
    EpisodeSets,
    RetrainBudget,
    RetrainError,
    RetrainResult,
    retrain,
)
from training.dl2.trainer import Dl2Trainer
from training.registry import trainers

TINY = RetrainBudget(
    imitation_epochs=2,
    updates=1,
    episodes_per_update=1,
    jobs=8,
    validation_episodes=0,
    held_out_episodes=1,
)


@pytest.fixture(scope="module")
def episode(tmp_path_factory: pytest.TempPathFactory) -> EpisodeSpec:
    """Eight elastic jobs on two 4-GPU nodes: contended, and well under a second to run."""
    folder = tmp_path_factory.mktemp("retrain")
    rows = ["job_id,submit_time_s,num_gpus,duration_s"]
    for i, (gpus, duration) in enumerate([(1, 900), (2, 1800), (1, 600), (4, 1200)] * 2):
        rows.append(f"t{i},{i * 120},{gpus},{duration}")
    trace = folder / "tiny.csv"
    trace.write_text("\n".join(rows) + "\n", encoding="utf-8")
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
    cluster = folder / "tiny.json"
    cluster.write_text(json.dumps({"name": "tiny", "node_groups": [group]}), encoding="utf-8")
    return EpisodeSpec(trace=str(trace), cluster=str(cluster), jobs=8, elastic_fraction=1.0, seed=3)


@pytest.fixture(scope="module")
def logged(episode: EpisodeSpec) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """DRF's decisions on the episode's eight jobs, as JSON, as the decision log stores them."""
    return [
        (to_builtins(snapshot), to_builtins(decision))
        for snapshot, decision in simulated_records([episode], teacher_profile("drf"))
    ]


@pytest.fixture(scope="module")
def incumbent(episode: EpisodeSpec) -> Dl2Model:
    families = tuple(sorted({j.family for j in episode.job_specs()}))
    return Dl2Model.initial(Dl2Config(window=4, families=families, hidden=(16, 8)), seed=5)


def test_retrain_walks_the_stages_and_judges_the_candidate_against_the_incumbent(
    episode: EpisodeSpec, incumbent: Dl2Model
) -> None:
    records = list(simulated_records([episode], teacher_profile("drf")))
    before = incumbent.to_bytes()
    seen: list[tuple[str, float]] = []

    result = retrain(
        records,
        incumbent,
        TINY,
        episodes=EpisodeSets(training=[episode], validation=[], held_out=[episode]),
        on_progress=lambda stage, fraction: seen.append((stage, fraction)),
    )

    stages = list(dict.fromkeys(stage for stage, _ in seen))
    assert stages == ["demonstrations", "imitation", "rl", "evaluation"]
    assert all(0.0 <= fraction <= 1.0 for _, fraction in seen)
    assert seen[-1] == ("evaluation", 1.0)
    metrics = result.metrics()
    assert metrics["records"] == len(records)
    assert int(metrics["demonstrations"]) > 0
    assert metrics["ppo_updates"] == 1
    assert metrics["episodes"] == 1
    assert metrics["candidate_wins"] is result.candidate_wins
    assert result.model.config == incumbent.config
    assert result.model.to_bytes() != before
    assert incumbent.to_bytes() == before


def test_records_without_any_scaling_to_imitate_fail_with_a_reason(
    episode: EpisodeSpec, incumbent: Dl2Model
) -> None:
    records = [
        (snapshot, replace(decision, scaling=()))
        for snapshot, decision in simulated_records([episode], teacher_profile("drf"))
    ]
    sets = EpisodeSets(training=[episode], validation=[], held_out=[episode])

    with pytest.raises(RetrainError, match="no scaling DL2 can imitate"):
        retrain(records, incumbent, TINY, episodes=sets)


def test_without_a_held_out_episode_there_is_no_verdict(incumbent: Dl2Model) -> None:
    with pytest.raises(RetrainError, match="held-out"):
        retrain([], incumbent, TINY, episodes=EpisodeSets([], [], []))


def test_the_default_episodes_follow_the_budget() -> None:
    sets = EpisodeSets.for_budget(
        RetrainBudget(jobs=12, validation_episodes=1, held_out_episodes=2)
    )

    assert len(sets.validation) == 1
    assert len(sets.held_out) == 2
    assert {spec.jobs for spec in [*sets.training, *sets.validation, *sets.held_out]} == {12}


def _retrain_on_log(
    records: list[tuple[dict[str, Any], dict[str, Any]]],
    incumbent: Dl2Model,
    episode: EpisodeSpec,
    budget: RetrainBudget = TINY,
) -> RetrainResult:
    # The shared-trace sets are stood in for by the tiny episode: the real windows take longer.
    sets = EpisodeSets(training=[episode], validation=[], held_out=[episode])
    return retrain(records, incumbent, budget, seed=2, episodes=sets)


@pytest.fixture(scope="module")
def logged_run(
    logged: list[tuple[dict[str, Any], dict[str, Any]]], incumbent: Dl2Model, episode: EpisodeSpec
) -> RetrainResult:
    return _retrain_on_log(logged, incumbent, episode)


def test_rl_plays_the_logged_jobs_when_they_fill_an_episode(logged_run: RetrainResult) -> None:
    metrics = logged_run.metrics()

    assert metrics["rl_episodes"] == "logged"
    assert (metrics["logged_jobs"], metrics["logged_episodes"]) == (8, 1)
    assert metrics["logged_jobs_skipped"] == 0
    assert logged_run.logged is not None
    (played,) = logged_run.logged.episodes
    assert played.trace == "log:tiny"
    assert played.job_specs()[0].submit_time == 0.0


def test_rl_falls_back_to_the_shared_traces_when_the_log_is_short_of_an_episode(
    logged: list[tuple[dict[str, Any], dict[str, Any]]], incumbent: Dl2Model, episode: EpisodeSpec
) -> None:
    result = _retrain_on_log(logged, incumbent, episode, TINY.model_copy(update={"jobs": 9}))

    metrics = result.metrics()
    assert metrics["rl_episodes"] == "shared-traces"
    assert (metrics["logged_jobs"], metrics["logged_episodes"]) == (8, 0)
    assert metrics["logged_jobs_left_over"] == 8
    assert metrics["ppo_updates"] == 1


def test_a_clusters_newest_logged_window_judges_the_candidate_and_rl_never_plays_it(
    logged: list[tuple[dict[str, Any], dict[str, Any]]], incumbent: Dl2Model, episode: EpisodeSpec
) -> None:
    halves = TINY.model_copy(update={"jobs": 4})  # the log's eight jobs fill two windows

    result = _retrain_on_log(logged, incumbent, episode, halves)

    assert result.logged is not None
    first, newest = result.logged.episodes
    assert result.log_verdict is not None
    (judged,) = result.log_verdict.candidate.episodes
    assert judged.episode == f"{newest.trace}@{newest.start}+{newest.jobs}" == "log:tiny@4+4"
    assert result.logged.split_newest() == ((first,), (newest,))
    metrics = result.metrics()
    assert metrics["log_verdict_episodes"] == 1
    assert metrics["candidate_wins"] == (
        result.comparison.candidate_wins and result.log_verdict.candidate_wins
    )
    assert metrics["rl_episodes"] == "logged"


def test_without_a_logged_held_out_window_rl_plays_every_logged_window(
    logged: list[tuple[dict[str, Any], dict[str, Any]]], incumbent: Dl2Model, episode: EpisodeSpec
) -> None:
    every = TINY.model_copy(update={"jobs": 4, "logged_held_out": False})

    result = _retrain_on_log(logged, incumbent, episode, every)

    assert result.log_verdict is None
    assert "log_verdict_episodes" not in result.metrics()
    assert result.candidate_wins == result.comparison.candidate_wins


def test_an_imitation_only_budget_plays_no_episode(
    logged: list[tuple[dict[str, Any], dict[str, Any]]], incumbent: Dl2Model, episode: EpisodeSpec
) -> None:
    result = _retrain_on_log(logged, incumbent, episode, TINY.model_copy(update={"updates": 0}))

    assert result.metrics()["rl_episodes"] == "none"


def test_retraining_on_the_log_with_one_seed_gives_the_same_candidate(
    logged: list[tuple[dict[str, Any], dict[str, Any]]],
    incumbent: Dl2Model,
    episode: EpisodeSpec,
    logged_run: RetrainResult,
) -> None:
    again = _retrain_on_log(logged, incumbent, episode)

    assert again.model.to_bytes() == logged_run.model.to_bytes()
    assert again.ppo_log[0]["mean_reward"] == logged_run.ppo_log[0]["mean_reward"]
    assert again.comparison == logged_run.comparison


def test_an_episode_replayed_from_its_own_log_runs_as_the_original(
    logged: list[tuple[dict[str, Any], dict[str, Any]]], episode: EpisodeSpec
) -> None:
    (replayed,) = logged_episodes(logged, episode.jobs, seed=episode.seed).episodes
    decide = EngineDecider(teacher_profile("drf"), build_registry())

    original = episode.simulation().run(decide).metrics
    again = replayed.simulation().run(decide).metrics

    assert again["avg_jct_s"] == original["avg_jct_s"]
    assert again["jobs_completed"] == original["jobs_completed"] == episode.jobs


def test_imitation_reads_records_with_joined_finishes_as_it_reads_them_without(
    logged: list[tuple[dict[str, Any], dict[str, Any]]], incumbent: Dl2Model
) -> None:
    finish = {"started_at": 0.0, "finished_at": 60.0, "outcome": "completed"}
    joined = [
        (snapshot, {**decision, FINISHED: {job["id"]: finish for job in snapshot["jobs"]}})
        for snapshot, decision in logged
    ]

    plain = demonstrations(logged, incumbent.config)
    with_finishes = demonstrations(joined, incumbent.config)

    assert len(plain) > 0
    assert (with_finishes.actions == plain.actions).all()
    assert (with_finishes.states == plain.states).all()


def test_a_logged_window_replays_each_job_for_the_run_its_caller_reported(
    episode: EpisodeSpec,
) -> None:
    """Rigid jobs served FIFO, logged as the service logs them with every estimate three
    times too long, and each job's finish reported with its start: the replayed episode
    runs each job for its reported span and shows schedulers the logged estimate."""
    rigid = dataclasses.replace(episode, elastic_fraction=0.0, ps_fraction=0.0)
    decide = EngineDecider.named("fifo")
    sim = rigid.simulation()
    snapshot = sim.reset(seed=rigid.seed)
    records: list[tuple[dict[str, Any], dict[str, Any]]] = []
    while snapshot is not None:
        decision = decide(snapshot, sim.round_seed(), "live")
        logged_snapshot = to_builtins(snapshot)
        for job in logged_snapshot["jobs"]:
            job["estimated_duration_s"] *= 3
        records.append((logged_snapshot, to_builtins(decision)))
        snapshot, _ = sim.step(decision)
    ran = sim.result().jobs
    spans = {j.job_id: j.finish_s - j.first_start_s for j in ran}  # type: ignore[operator]
    records[-1][1][FINISHED] = {
        j.job_id: {"started_at": j.first_start_s, "finished_at": j.finish_s} for j in ran
    }

    found = logged_episodes(records, rigid.jobs)

    (replayed,) = found.episodes
    assert (found.measured, found.interrupted) == (rigid.jobs, 0)
    assert all(j.preemptions == 0 for j in ran)
    assert {j.id: j.duration_s for j in replayed.job_specs()} == spans
    assert {j.id: j.estimate_s for j in replayed.job_specs()} == {
        j.id: 3 * j.estimate_s for j in rigid.job_specs()
    }


def test_each_served_dl2_profile_names_its_models_ordering_floor_and_teacher() -> None:
    fifo, srtf = ServedSetting.of("dl2"), ServedSetting.of("dl2-srtf")
    assert (fifo.ordering.name, fifo.floor, fifo.teacher) == ("fifo", DEFAULT_FLOOR, "drf")
    assert (srtf.ordering.name, srtf.floor, srtf.teacher) == (
        "srtf",
        FloorParams(minimum_when_full=True),
        "optimus",
    )
    with pytest.raises(ValueError, match="serves no DL2 model"):
        ServedSetting.of("optimus")


def test_each_dl2_trainer_retrains_the_model_key_its_profile_serves() -> None:
    found = {t.name: t for t in trainers() if isinstance(t, Dl2Trainer)}
    assert set(found) == {"dl2", "dl2-srtf"}
    for name, trainer in found.items():
        setting = ServedSetting.of(trainer.profile)
        assert setting.model_key == name
        assert trainer.shipped_version() == shipped_model(setting.shipped_file).version
    assert found["dl2"].shipped_version() != found["dl2-srtf"].shipped_version()


def test_a_retraining_in_the_srtf_setting_judges_both_models_behind_srtf_with_its_floor(
    episode: EpisodeSpec, incumbent: Dl2Model
) -> None:
    setting = ServedSetting.of("dl2-srtf")
    records = list(simulated_records([episode], teacher_profile("drf")))

    result = retrain(
        records,
        incumbent,
        TINY,
        episodes=EpisodeSets(training=[episode], validation=[], held_out=[episode]),
        setting=setting,
    )

    behind_srtf = score(incumbent, setting.applied([episode]), floor=setting.floor)
    assert result.comparison.incumbent.episodes == behind_srtf.episodes
    # The setting matters on this episode: behind FIFO the same model schedules otherwise.
    assert behind_srtf.episodes != score(incumbent, [episode]).episodes
