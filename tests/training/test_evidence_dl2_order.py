"""DL2 behind another ordering: the ordering reaches every stage that plays an episode."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from evidence.evidence_dl2_gap import Windows
from evidence.evidence_dl2_order import CONDITIONS, ESTIMATE_ERROR, SRTF, main
from evidence.results_sections import sections
from policies.common.pool import FloorParams
from policies.learned.dl2.features import Dl2Config
from policies.learned.dl2.network import Dl2Model
from training.dl2.episodes import held_out_episodes
from training.dl2.evaluation import contender_pipeline, score
from training.dl2.imitation import teacher_profile
from training.dl2.rollout import dl2_pipeline, play_episode


def test_an_episodes_ordering_replaces_the_dl2_profiles_in_rollouts_scores_and_teachers() -> None:
    model = Dl2Model.initial(Dl2Config(window=4, hidden=(8, 8)), seed=1)

    assert contender_pipeline(model).ordering.name == "fifo"
    assert contender_pipeline(model, ordering=SRTF).ordering.name == "srtf"
    assert dl2_pipeline(contender_pipeline(model).scaling, ordering=SRTF).ordering.name == "srtf"
    assert teacher_profile("drf", ordering=SRTF).ordering == SRTF
    assert teacher_profile("drf").ordering.name == "fifo"
    # A profile scored on such an episode keeps its own ordering.
    assert contender_pipeline("drf", ordering=SRTF).ordering.name == "fifo"


def test_an_episode_behind_srtf_is_played_and_scored_to_the_end() -> None:
    (window,) = Windows.default(quick=True).held_out
    behind = dataclasses.replace(window, ordering=SRTF)
    model = Dl2Model.initial(Dl2Config(window=4, hidden=(8, 8)), seed=1)

    played = play_episode(behind, model, np.random.default_rng(0))
    (scored,) = score(model, [behind]).episodes

    assert played.result is not None
    assert played.result.metrics["jobs_completed"] == scored.jobs_completed == window.jobs


@pytest.mark.slow
def test_quick_run_writes_every_condition_beside_the_two_profiles(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    out.write_text("# Results\n\nkept as it was\n", encoding="utf-8")
    assert main(["--quick", "--out", str(out)]) == 0

    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Results\n\nkept as it was\n")
    body = sections(text)["dl2-order"]
    settings: set[tuple[str, str | None, float, bool]] = set()
    for condition in CONDITIONS:
        for row in ("DL2, RL", "DL2, warm-up only"):
            assert f"| {condition.label} | {row} |" in body
        # The heuristics train nothing: shown once per ordering, estimates and floor, with
        # the first condition that has them; as requested has no floor, so a floor never
        # shows it again.
        ordering = None if condition.ordering is None else condition.ordering.name
        for row in ("DRF scaling", "Optimus scaling", "as requested"):
            floor = condition.floor.minimum_when_full and row != "as requested"
            setting = (row, ordering, condition.estimate_error, floor)
            assert (f"| {condition.label} | {row} |" in body) is (setting not in settings)
            settings.add(setting)
    for served in ("as served", f"as served, estimates off (σ {ESTIMATE_ERROR:g})"):
        assert f"| {served} | `drf` profile |" in body
        assert f"| {served} | `optimus` profile |" in body
    # FIFO with DRF scaling reads no estimate: its profile is the same with them off.
    assert f"* **Estimates off by a log-normal factor (σ {ESTIMATE_ERROR:g}).**" in body
    assert "the `drf` profile +0.0 %" in body
    assert "* **DL2 behind SRTF.**" in body
    assert "* **DL2 behind SRTF, imitating Optimus scaling.**" in body
    assert "against its teacher (Optimus scaling)" in body
    assert "against its teacher (as requested)" in body
    assert "* **Every waiting job its minimum, even over a full pool.** Behind SRTF" in body


def test_an_episodes_score_counts_the_running_jobs_its_run_stopped() -> None:
    # A held-out window whose first 30 jobs contend: SRTF stops running jobs for shorter ones.
    behind = dataclasses.replace(held_out_episodes()[3], ordering=SRTF, jobs=30)
    requested = teacher_profile("as_requested", ordering=SRTF)
    pipeline = contender_pipeline(requested)

    (scored,) = score(requested, [behind]).episodes
    run = behind.simulation().run(
        lambda snapshot, seed, decision_id: pipeline.decide(
            snapshot, seed=seed, decision_id=decision_id, explain=False
        )
    )

    assert scored.preemptions == run.metrics["preemptions"] > 0


def test_behind_srtf_optimus_scaling_preempts_only_when_a_waiting_job_gets_its_minimum() -> None:
    behind = dataclasses.replace(held_out_episodes()[3], ordering=SRTF, jobs=30)
    over_full = FloorParams(minimum_when_full=True)

    (bound,) = score(teacher_profile("optimus", ordering=SRTF), [behind]).episodes
    (floored,) = score(
        teacher_profile("optimus", floor=over_full, ordering=SRTF), [behind]
    ).episodes

    assert bound.preemptions == 0
    assert floored.preemptions > 0
    assert floored.jobs_completed == bound.jobs_completed == 30


def test_a_teacher_gets_the_floor_only_when_its_heuristic_has_one() -> None:
    over_full = FloorParams(keep_running=False, minimum_when_full=True)
    wanted = {"keep_running": False, "minimum_when_full": True}
    assert teacher_profile("optimus", floor=over_full).scaling.params == wanted
    assert teacher_profile("drf", floor=over_full).scaling.params == wanted
    # As requested gives every job its request: it has no floor to set.
    assert teacher_profile("as_requested", floor=over_full).scaling.params == {}
