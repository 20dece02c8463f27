"""Aryl's evidence over seeds: ratios with their spread, tables of means, every load."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence.evidence_aryl import Run, main, mean_run, spread_ratio
from evidence.results_sections import sections


def _run(seed: int, jct: float, reclaims: int) -> Run:
    metrics = {"avg_jct_s": jct, "reclaims": reclaims, "profile": "aryl"}
    return Run("aryl", seed, metrics, usage=0.1 * (seed + 1), loaned_gpu_h=1.0, lendable_share=0.5)


def test_a_profile_over_seeds_is_the_mean_of_every_number() -> None:
    mean = mean_run([_run(0, 100.0, 3), _run(1, 200.0, 4)])
    assert mean.metrics["avg_jct_s"] == pytest.approx(150.0)
    assert mean.metrics["reclaims"] == pytest.approx(3.5)
    assert mean.metrics["profile"] == "aryl"
    assert mean.usage == pytest.approx(0.15)


def test_a_ratio_whose_spread_reaches_one_is_a_tie() -> None:
    assert spread_ratio([1.5, 1.6, 1.4]).endswith("(lower)")
    assert spread_ratio([0.8, 0.7, 0.9]).endswith("(higher)")
    assert spread_ratio([1.3, 0.8, 1.0]).endswith("(a tie)")


@pytest.mark.slow
def test_a_short_run_over_two_seeds_writes_every_load(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    assert main(["--jobs", "60", "--seeds", "0", "1", "--out", str(out)]) == 0
    body = sections(out.read_text(encoding="utf-8"))["aryl"]
    for load in ("x1", "x3"):
        assert f"### Arrivals {load} (means over seeds)" in body
        assert f"| ours, arrivals {load} | 2 |" in body
    assert "**Whole trace.**" in body
