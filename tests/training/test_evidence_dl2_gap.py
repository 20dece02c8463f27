"""The DL2 gap experiment: every condition trained, judged and read against the paper."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from evidence.evidence_dl2_gap import CONDITIONS, main, verdict
from evidence.results_sections import sections
from training.dl2.episodes import held_out_episodes


def test_a_difference_within_the_spread_of_seeds_is_a_tie() -> None:
    assert verdict([-0.10, -0.12, -0.08]).endswith("(lower)")
    assert verdict([0.10, 0.12, 0.08]).endswith("(higher)")
    assert verdict([-0.10, 0.05, 0.02]).endswith("(tie)")


def test_the_paper_conditions_give_every_job_elasticity_and_parameter_servers() -> None:
    paper = [c for c in CONDITIONS if c.key.startswith("paper-jobs")]
    assert paper
    episode = held_out_episodes(20)[0]
    for condition in paper:
        jobs = condition.applied([episode])[0].job_specs()
        assert all(job.ps > 0 for job in jobs)
        assert all(job.max_workers > job.workers for job in jobs)
    in_place = next(c for c in paper if not c.restarts)
    assert in_place.applied([episode])[0].simulation().perf_options.restarts is False
    # Only the last condition reallocates running jobs, in place as the one before.
    whole = [c for c in CONDITIONS if not c.floor.keep_running]
    assert [c.key for c in whole] == ["paper-jobs-reallocated"]
    assert not whole[0].restarts
    shipped = next(c for c in CONDITIONS if c.key == "budget-10x")
    assert shipped.applied([episode])[0] == dataclasses.replace(episode)


@pytest.mark.slow
def test_quick_run_writes_every_condition_beside_the_paper(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    out.write_text("# Results\n\nkept as it was\n", encoding="utf-8")
    assert main(["--quick", "--out", str(out)]) == 0

    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Results\n\nkept as it was\n")
    body = sections(text)["dl2-gap"]
    for condition in CONDITIONS:
        assert f"| {condition.label} |" in body
    assert "−44.1 %" in body
    assert "−17.5 %" in body
    assert "**Beside the paper.**" in body
