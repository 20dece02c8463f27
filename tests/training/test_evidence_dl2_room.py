"""DL2's room: the floor no policy beats, the hindsight pick, and the section they make."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

import pytest

from evidence.evidence_dl2_gap import Windows
from evidence.evidence_dl2_room import HEURISTICS, OURS, SETTINGS, SHIPPED, Group, main, run
from evidence.results_sections import sections
from training.dl2.episodes import EpisodeSpec


def results_windows() -> tuple[EpisodeSpec, ...]:
    return Windows.default(quick=True).held_out


def _group(jct: dict[str, tuple[float, ...]], finished: dict[str, tuple[int, ...]]) -> Group:
    return Group(
        setting=OURS,
        jct_s=jct,
        finished=finished,
        floor_s=(100.0, 100.0),
        fit=(80, 80),
    )


def test_hindsight_picks_the_fastest_heuristic_of_each_window() -> None:
    group = _group(
        {"drf": (500.0, 900.0), "optimus": (600.0, 700.0), "as_requested": (550.0, 800.0)},
        dict.fromkeys(HEURISTICS, (80, 80)),
    )
    assert group.hindsight == (500.0, 700.0)


def test_hindsight_never_picks_a_heuristic_that_finished_fewer_jobs() -> None:
    # As requested left a job unstarted in the first window: its average is over fewer jobs.
    group = _group(
        {"drf": (500.0, 900.0), "optimus": (600.0, 700.0), "as_requested": (300.0, 800.0)},
        {"drf": (80, 80), "optimus": (80, 80), "as_requested": (79, 80)},
    )
    assert group.hindsight == (500.0, 700.0)


def test_no_contender_beats_the_floor_in_any_window() -> None:
    runner = argparse.Namespace(processes=1, ray=None)
    results = run(quick=True, runner_args=runner)
    assert [g.setting for g in results.groups] == list(SETTINGS)
    for group in results.groups:
        assert set(HEURISTICS) <= set(group.jct_s)
        for name, values in group.jct_s.items():
            for window, (jct, floor) in enumerate(zip(values, group.floor_s, strict=True)):
                assert jct >= floor, (group.setting.label, name, window)
        for window, best in enumerate(group.hindsight):
            assert best in [group.jct_s[h][window] for h in HEURISTICS]
    # The shipped model is judged only on the jobs it was trained for (at every load).
    shipped = [SHIPPED in g.jct_s for g in results.groups]
    assert shipped == [s.condition == OURS.condition for s in SETTINGS]
    assert shipped.count(False) == 2
    # The load rows scale every node group of the windows' clusters, and nothing else.
    scaled = next(s for s in SETTINGS if s.scale == 0.5)
    base, half = OURS.windows(results_windows()), scaled.windows(results_windows())
    for a, b in zip(base, half, strict=True):
        assert b == dataclasses.replace(a, cluster_fraction=a.cluster_fraction * 0.5)


@pytest.mark.slow
def test_quick_run_writes_every_setting_beside_the_paper(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    out.write_text("# Results\n\nkept as it was\n", encoding="utf-8")
    assert main(["--quick", "--out", str(out)]) == 0

    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Results\n\nkept as it was\n")
    body = sections(text)["dl2-room"]
    for setting in SETTINGS:
        assert f"| {setting.label} | DRF scaling |" in body
        assert f"| {setting.label} | floor: each job alone at its fastest |" in body
    assert "* **Load.**" in body
    assert "−32.2 %" in body  # the paper's Optimus against its DRF, from its two margins
    assert "**Beside the paper.**" in body
