"""Replaying through the HTTP service gives the same metrics as the engine in process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from simulator.core import SimOptions
from simulator.deciders import EngineDecider, HttpDecider
from simulator.metrics import TIMING_KEYS
from simulator.runner import RunConfig, simulate
from simulator.synthetic import SyntheticSpec, generate
from simulator.workload import WorkloadOptions
from tests.simulator.helpers import cluster, group


@pytest.fixture
def client(tmp_path: Path) -> Iterator[TestClient]:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
    )
    with TestClient(create_app(settings)) as test_client:
        yield test_client


def strip(metrics: dict[str, Any]) -> dict[str, Any]:
    """Metrics without the wall-clock ones, which differ from run to run."""
    return {k: v for k, v in metrics.items() if k not in TIMING_KEYS}


@pytest.mark.parametrize("profile", ["tiresias", "random", "optimus"])
def test_metrics_via_http_equal_in_process(client: TestClient, profile: str) -> None:
    shape = SyntheticSpec(
        jobs=30, arrivals_per_hour=60, gpu_mix={1: 2, 2: 1, 4: 1}, duration_sigma=0.8
    )
    jobs = generate(shape, seed=3)
    spec = cluster(group(2, 4, "V100"), group(1, 4, "K80"))
    config = RunConfig(
        seed=5,
        workload=WorkloadOptions(elastic_fraction=0.5),
        sim=SimOptions(round_period_s=300.0),
    )
    local = simulate(jobs, spec, [profile], config, decider_for=EngineDecider.named)
    remote = simulate(
        jobs,
        spec,
        [profile],
        config,
        decider_for=lambda name: HttpDecider("http://testserver", name, client=client),
    )
    assert strip(remote[0].result.metrics) == strip(local[0].result.metrics)
    assert [r.row() for r in remote[0].result.jobs] == [r.row() for r in local[0].result.jobs]
