"""The DL2 evidence script's smoke run: one short window per set, every contender reported."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence.evidence_dl2 import main
from evidence.results_sections import sections


@pytest.mark.slow
def test_quick_run_writes_the_dl2_section_with_every_contender(tmp_path: Path) -> None:
    out = tmp_path / "results.md"
    out.write_text("# Results\n\nkept as it was\n", encoding="utf-8")
    assert main(["--quick", "--out", str(out)]) == 0

    text = out.read_text(encoding="utf-8")
    assert text.startswith("# Results\n\nkept as it was\n")
    body = sections(text)["dl2"]
    for column in (
        "DL2 RL (shipped)",
        "DL2 warm-up",
        "DRF scaling",
        "Optimus scaling",
        "as requested",
        "`drf` profile",
        "`optimus` profile",
    ):
        assert column in body
    for episode_set in ("held-out", "Philly, later", "Helios, later", "ITP", "Alibaba"):
        assert f"| {episode_set}" in body
    assert "−44.1 %" in body
    assert "−17.5 %" in body
