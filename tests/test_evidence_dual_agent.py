"""The dual agent's evidence: paired differences, the target's rule, and the section's text."""

from __future__ import annotations

import math

import pytest

from evidence.evidence_dual_agent import Runs, paired, section, target_met, verdicts
from training.dual_agent.episodes import SECOND_HELD_OUT_STARTS

TIRESIAS = "tiresias + consolidated"
GREEDY = "tiresias + hetero-greedy (true speed table, per dollar)"
JITTER = (3.0, -2.0, 1.0, -3.0, 2.0, -1.0)


def _runs(fee_cut: float, jct_cut: float) -> Runs:
    """Baselines first (the rule reads them from the front), then the dual agent: its fee
    is the cheaper baseline's (the greedy one) less `fee_cut`, its JCT the faster one's
    (Tiresias) less `jct_cut`, each give or take a little from run to run (mean 0)."""
    tiresias = [(100.0 + i, 5000.0 + 10 * i) for i in range(6)]
    greedy = [(fee - 5.0, jct + 20.0) for fee, jct in tiresias]
    ours = [
        (g_fee - fee_cut + 0.1 * e, t_jct - jct_cut + e)
        for e, (g_fee, _), (_, t_jct) in zip(JITTER, greedy, tiresias, strict=True)
    ]
    return {TIRESIAS: tiresias, GREEDY: greedy, "dual-agent": ours}


def test_paired_gives_the_mean_and_standard_error_of_per_run_differences() -> None:
    mean, se = paired([1.0, 2.0, 3.0], [2.0, 4.0, 6.0])  # differences −1, −2, −3
    assert mean == pytest.approx(-2.0)
    assert se == pytest.approx(1.0 / math.sqrt(3))
    assert paired([1.0], [2.0]) == (-1.0, math.inf)


def test_the_target_needs_lower_fee_and_jct_than_both_baselines() -> None:
    assert target_met(_runs(fee_cut=3.0, jct_cut=100.0))
    # Cheaper than Tiresias (by about 2 USD) but dearer than the greedy baseline.
    assert not target_met(_runs(fee_cut=-3.0, jct_cut=100.0))
    # Faster by less than the spread: a tie is not a win.
    assert not target_met(_runs(fee_cut=3.0, jct_cut=0.0))


def test_verdicts_word_each_difference_and_count_the_runs_won() -> None:
    rows = verdicts(_runs(fee_cut=3.0, jct_cut=0.0))
    tiresias = next(row for row in rows if row.startswith(f"| {TIRESIAS} |"))
    assert "| lower | 6 of 6 |" in tiresias  # the fee: about 8 USD below in every run
    assert "| tie |" in tiresias  # the JCT: 3 s either way, within twice its standard error


def test_the_section_names_the_windows_size_and_the_verdict_of_each_set() -> None:
    body = section(
        ["| table |"],
        _runs(fee_cut=3.0, jct_cut=0.0),
        ["| gp |"],
        seeds=3,
        windows=2,
        gp_seeds=5,
        jobs=40,
        second=(["| second table |"], _runs(fee_cut=3.0, jct_cut=100.0)),
    )
    assert "2 held-out windows of 40 jobs" in body
    assert f"{len(SECOND_HELD_OUT_STARTS)} more windows of 40 jobs" in body
    assert "beyond the ties: **no**." in body  # the first set: a JCT tie
    assert "beyond the ties): **met**." in body  # the second set
