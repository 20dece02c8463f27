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
from simulator.inference import InferenceOptions
from simulator.metrics import TIMING_KEYS
from simulator.runner import RunConfig, simulate
from simulator.synthetic import SyntheticSpec, generate
from simulator.workload import WorkloadOptions
from tests.simulator.helpers import cluster, group, write_series


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


@pytest.mark.parametrize("profile", ["aryl", "static", "oasis"])
def test_loaning_run_via_http_equals_in_process(
    client: TestClient, tmp_path: Path, profile: str
) -> None:
    # Reclaims go to POST /v1/reclaim and decisions to POST /v1/decisions (OASiS's
    # state kept by the service): the run is the same as in process.
    jobs = generate(
        SyntheticSpec(jobs=30, arrivals_per_hour=30, gpu_mix={1: 2, 2: 1, 4: 1}), seed=4
    )
    spec = cluster(group(2, 4, "V100"), group(2, 4, "T4", pool="inference", rack_size=2))
    series = write_series(tmp_path / "demand.csv", [0.0, 0.0, 0.5, 1.0, 0.0, 0.5] * 2)
    config = RunConfig(
        seed=5,
        workload=WorkloadOptions(elastic_fraction=0.5, utility="sigmoid"),
        sim=SimOptions(round_period_s=300.0),
        inference=InferenceOptions(
            series=str(series), loan_idle=True, peak_quantile=1.0, offset_s=0.0, smoothing_bins=1
        ),
    )
    local = simulate(jobs, spec, [profile], config, decider_for=EngineDecider.named)
    remote = simulate(
        jobs,
        spec,
        [profile],
        config,
        decider_for=lambda name: HttpDecider("http://testserver", name, client=client),
    )
    assert local[0].result.metrics["reclaims"] > 0
    assert strip(remote[0].result.metrics) == strip(local[0].result.metrics)
    assert [r.row() for r in remote[0].result.jobs] == [r.row() for r in local[0].result.jobs]
