"""OASiS's evidence over seeds: paired comparisons, ties within the spread, every case written."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence.evidence_oasis import CASES, Run, compare, main
from evidence.results_sections import sections


def _run(profile: str, seed: int, utility: float) -> Run:
    return Run(profile, seed, {"utility": utility}, reference=1_000.0)


def test_oasis_is_compared_with_a_baseline_seed_by_seed() -> None:
    # Each side spreads by about 100 over the seeds, yet every pair differs by 9 to 11:
    # paired by seed, OASiS's 10 more is beyond the spread of the differences.
    agreeing = [_run("oasis", s, u) for s, u in ((0, 110), (1, 210), (2, 310))]
    agreeing += [_run("fifo", s, u) for s, u in ((0, 100), (1, 199), (2, 301))]
    word, mean, spread, seeds = compare(agreeing, "fifo")
    assert (word, seeds) == ("more", 3)
    assert mean == pytest.approx(10.0)
    assert spread == pytest.approx(1.0)


def test_a_difference_within_the_spread_of_seeds_is_a_tie() -> None:
    runs = [_run("oasis", s, u) for s, u in ((0, 120), (1, 180), (2, 300))]
    runs += [_run("drf", s, u) for s, u in ((0, 100), (1, 200), (2, 290))]
    assert compare(runs, "drf")[0] == "a tie"


@pytest.mark.slow
def test_a_short_run_over_two_seeds_writes_every_case(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    assert main(["--max-jobs", "80", "--seeds", "0", "1", "--out", str(out)]) == 0
    body = sections(out.read_text(encoding="utf-8"))["oasis"]
    for case in CASES:
        assert f"### {case.label}" in body
    assert "| oasis | 2 |" in body
    assert "| oasis-slot-end | 2 |" in body  # the paper's completion rule beside ours
    assert "the paper's rule, row oasis-slot-end" in body
    assert "comparisons over the seeds" in body
