"""`python -m evidence.train_dl2`: each served DL2 profile's model, trained in its setting."""

from __future__ import annotations

from pathlib import Path

import pytest

from evidence.train_dl2 import SHIPPED_DIR, budget, build_parser, main, out_path
from policies.learned.dl2.network import Dl2Model


def test_each_profile_writes_where_its_scaling_policy_reads_its_shipped_model() -> None:
    for profile, file in (("dl2", "dl2.safetensors"), ("dl2-srtf", "dl2_srtf.safetensors")):
        assert out_path(build_parser().parse_args(["--profile", profile])) == SHIPPED_DIR / file


def test_the_srtf_profiles_episodes_play_behind_srtf_and_its_warm_up_imitates_optimus() -> None:
    run = budget(build_parser().parse_args(["--profile", "dl2-srtf", "--quick"]))
    assert run.teacher == "optimus"
    assert run.setting.floor.minimum_when_full
    episodes = run.train + run.validation + run.held_out
    assert episodes
    assert {e.ordering.name for e in episodes if e.ordering is not None} == {"srtf"}
    assert all(e.ordering is not None for e in episodes)
    explicit = budget(build_parser().parse_args(["--quick", "--teacher", "as_requested"]))
    assert explicit.teacher == "as_requested"


def test_a_smoke_run_for_the_srtf_profile_writes_a_model_that_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "dl2_srtf.safetensors"
    assert main(["--profile", "dl2-srtf", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "profile dl2-srtf: ordering srtf" in printed
    assert "teacher optimus scaling" in printed
    assert "profile optimus" in printed
    Dl2Model.from_bytes(out.read_bytes())
