"""Replaying through the HTTP service gives the same metrics as the engine in process."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import create_engine, text

from app.main import create_app
from app.settings import Settings
from policies.decision import Decision
from policies.model import Snapshot, ThroughputObservation
from policies.reclaim_models import ReclaimRequest, ReclaimResult
from simulator.core import SimOptions
from simulator.deciders import DecisionServiceError, EngineDecider, HttpDecider
from simulator.inference import InferenceOptions
from simulator.metrics import TIMING_KEYS
from simulator.runner import RunConfig, simulate
from simulator.synthetic import SyntheticSpec, generate
from simulator.workload import WorkloadOptions
from tests.simulator.helpers import cluster, group, write_series
from training.dual_agent.episodes import window


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
    )


@pytest.fixture
def client(settings: Settings) -> Iterator[TestClient]:
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


HETERO = window(start=0, jobs=12, seed=3, cluster_fraction=0.2)
"""The dual agent's episodes at their smallest with a choice of machine: two machines of
each GPU type (at 0.12, the training tests' size, one of each: the GP's view of a
machine then never changes where a job goes)."""


def http_decider(client: TestClient, profile: str) -> HttpDecider:
    return HttpDecider("http://testserver", profile, client=client)


def throughput_events_accepted(client: TestClient) -> float:
    """`arbiter_feedback_events_total{kind="throughput"}` of the service's own metrics."""
    for family in text_string_to_metric_families(client.get("/metrics").text):
        for sample in family.samples:
            if (
                sample.name == "arbiter_feedback_events_total"
                and sample.labels.get("kind") == "throughput"
            ):
                return sample.value
    return 0.0


def gp_state(client: TestClient, cluster_id: str) -> object:
    """The dual agent's GP observations the service keeps for the cluster (None: none)."""
    services = client.app.state.services  # type: ignore[attr-defined]
    return services.decisions.load_state(cluster_id, ("rwgp",)).get("rwgp")


class _Unobserving:
    """The engine in process without its `observe`: what a run through a service that
    never hears of throughput amounts to."""

    def __init__(self, inner: EngineDecider) -> None:
        self.inner = inner

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
        return self.inner(snapshot, seed, decision_id)

    def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
        return self.inner.reclaim(snapshot, request, seed)


def test_a_dual_agent_run_via_http_learns_from_feedback_as_the_engine_in_process(
    client: TestClient,
) -> None:
    # The observed speeds go to POST /v1/feedback and into the GP the service's
    # decisions read for the snapshot's cluster: the run is the same as in process,
    # which it would not be without them.
    engine = EngineDecider.named("dual-agent")
    local = HETERO.simulation().run(engine)
    unobserved = HETERO.simulation().run(_Unobserving(EngineDecider.named("dual-agent")))
    simulation = HETERO.simulation()
    decider = http_decider(client, "dual-agent")

    remote = simulation.run(decider)

    assert decider.learns_from_feedback
    assert strip(unobserved.metrics) != strip(local.metrics)
    assert strip(remote.metrics) == strip(local.metrics)
    assert [r.row() for r in remote.jobs] == [r.row() for r in local.jobs]
    learned = engine.state["rwgp"]
    assert gp_state(client, simulation.cluster_id) == learned
    assert isinstance(learned, dict)
    assert isinstance(learned["nodes"], dict)
    assert len(learned["nodes"]) > 1  # more than one machine observed
    assert throughput_events_accepted(client) > 0


def test_a_replayed_run_sends_the_same_feedback_event_ids_which_the_log_keeps_once(
    client: TestClient, settings: Settings
) -> None:
    # Ids follow from the cluster, the round and the index: distinct within a run, the
    # same when the run is sent again (here to a service that forgot the cluster's GP
    # and the event ids it learned, as a fresh one would), so the log does not count an
    # observation twice.
    log = client.app.state.decision_log  # type: ignore[attr-defined]
    services = client.app.state.services  # type: ignore[attr-defined]

    def logged_ids() -> list[str]:
        assert log.flush(timeout_s=10.0)
        engine = create_engine(settings.database_url)
        with engine.connect() as connection:
            ids = connection.execute(text("SELECT event_id FROM feedback_events")).scalars()
            out = sorted(ids)
        engine.dispose()
        return out

    simulation = HETERO.simulation()
    first = simulation.run(http_decider(client, "dual-agent"))
    sent_once = throughput_events_accepted(client)
    ids = logged_ids()
    services.decisions.drop_state(simulation.cluster_id)
    again = HETERO.simulation().run(http_decider(client, "dual-agent"))

    assert strip(again.metrics) == strip(first.metrics)
    assert throughput_events_accepted(client) == 2 * sent_once
    assert len(ids) == len(set(ids)) == sent_once > 0
    assert all(i.startswith(f"{simulation.cluster_id}/sim-3-") for i in ids)
    assert logged_ids() == ids


def test_a_profile_without_a_feedback_learner_posts_no_feedback(client: TestClient) -> None:
    decider = http_decider(client, "tiresias")
    simulation = HETERO.simulation()

    run = simulation.run(decider)
    decider.observe([ThroughputObservation(node_id="g0-v100-0000", job_id="j", relative_speed=0.5)])

    assert run.metrics["jobs_completed"] == HETERO.jobs
    assert not decider.learns_from_feedback
    assert throughput_events_accepted(client) == 0
    assert gp_state(client, simulation.cluster_id) is None


def test_throughput_observed_before_the_first_decision_is_posted_with_it(
    client: TestClient,
) -> None:
    # Until a snapshot names the cluster, the decider does not know where the GP is.
    snapshot = HETERO.simulation().reset()
    assert snapshot is not None
    node = snapshot.nodes[0].id
    decider = http_decider(client, "dual-agent")

    decider.observe([ThroughputObservation(node_id=node, job_id="j", relative_speed=0.5)])
    held = throughput_events_accepted(client)
    decider(snapshot, 0, "d0")

    assert held == 0
    assert throughput_events_accepted(client) == 1
    assert gp_state(client, snapshot.cluster_id) == {
        "version": 1,
        "nodes": {node: [1.0, math.log(0.5)]},
    }


def test_feedback_the_service_refuses_is_a_decision_service_error(client: TestClient) -> None:
    snapshot = HETERO.simulation().reset()
    assert snapshot is not None
    decider = http_decider(client, "dual-agent")
    decider(snapshot, 0, "d0")
    too_long = "j" * 256  # a job id the service's feedback schema refuses

    with pytest.raises(DecisionServiceError, match=r"/v1/feedback answered 422"):
        decider.observe(
            [
                ThroughputObservation(
                    node_id=snapshot.nodes[0].id, job_id=too_long, relative_speed=1.0
                )
            ]
        )
