"""The `dl2-srtf` evidence's smoke run: every contender, the targets, the warm-up beside RL."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence.evidence_dl2_srtf import main
from evidence.results_sections import sections


@pytest.mark.slow
def test_quick_run_writes_the_dl2_srtf_section_with_the_targets_and_the_warm_up(
    tmp_path: Path,
) -> None:
    out = tmp_path / "results.md"
    out.write_text("# Results\n\nkept as it was\n", encoding="utf-8")
    assert main(["--quick", "--out", str(out)]) == 0

    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Results\n\nkept as it was\n")
    body = sections(text)["dl2-srtf"]
    header = next(line for line in body.splitlines() if line.startswith("| episode set | DL2"))
    assert header.split(" | ")[1:8] == [
        "DL2 RL (shipped)",
        "DL2 warm-up",
        "Optimus scaling",
        "DRF scaling",
        "as requested",
        "`drf` profile",
        "`optimus` profile",
    ]
    for episode_set in ("held-out", "Philly, later", "Helios, later", "ITP", "Alibaba"):
        assert f"| {episode_set}" in body
    assert "| target | −20.0 % | −5.0 % |" in body
    assert "| paper (Peng et al., 2019) | −44.1 % | −17.5 % |" in body
    assert "RL vs warm-up" in body
    assert "`minimum_when_full: true`" in body
    assert "Fallbacks to Optimus scaling: DL2 RL 0, warm-up 0." in body
