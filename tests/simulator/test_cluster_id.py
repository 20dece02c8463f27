"""`arbiter simulate --cluster-id`: which cluster id a replay's snapshots carry.

A service keeps policy state per cluster id, so replays through one (`--via-http`) get an
id of their own per profile run unless one is given, and the id changes no metric.
The runs go through `run_simulate` with the service's TestClient for `--via-http`, on
the first rows of the Philly trace on the heterogeneous Gavel cluster under
`dual-agent`, whose GP of machine speeds (policy state fed by `POST /v1/feedback`)
changes where later jobs go when a run starts from another run's.
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.settings import Settings
from simulator.cli import add_simulate_arguments, run_simulate
from simulator.cluster_ids import fresh_cluster_id, run_cluster_ids
from simulator.paths import clusters_dir, traces_dir

# The service's fixtures (a fresh app on a throwaway SQLite file) and the metrics
# comparison of the in-process-versus-HTTP tests.
from tests.simulator.test_via_http import client, settings, strip

__all__ = ["client", "settings"]

RUN = (
    "--trace",
    str(traces_dir() / "philly.2w-2017-10-02.csv"),
    "--cluster",
    str(clusters_dir() / "hetero-gavel.json"),
    "--max-jobs",
    "12",
    "--model-mix",
    "gavel",
    "--json",
)
SERVICE = ("--via-http", "http://testserver")
FRESH = re.compile(r"^sim-hetero-gavel-[0-9a-f]{8}$")


def simulate_cli(
    capsys: pytest.CaptureFixture[str], *argv: str, service: TestClient | None = None
) -> tuple[int, list[dict[str, Any]], str]:
    """`arbiter simulate` (RUN and `argv`): exit status, its results, and stderr."""
    parser = argparse.ArgumentParser()
    add_simulate_arguments(parser)
    status = run_simulate(parser.parse_args([*RUN, *argv]), http_client=service)
    out, err = capsys.readouterr()
    return status, json.loads(out)["results"] if status == 0 else [], err


def metrics(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [strip(result) for result in results]


def logged_cluster_ids(service: TestClient, settings: Settings) -> set[str]:
    """The cluster ids of the decisions the service logged."""
    assert service.app.state.decision_log.flush(timeout_s=10.0)  # type: ignore[attr-defined]
    engine = create_engine(settings.database_url)
    with engine.connect() as connection:
        ids = set(connection.execute(text("SELECT cluster_id FROM decisions")).scalars())
    engine.dispose()
    return ids


def test_replays_through_one_service_each_start_from_empty_state(
    client: TestClient, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    _, in_process, _ = simulate_cli(capsys, "--profile", "dual-agent")
    _, first, _ = simulate_cli(capsys, "--profile", "dual-agent", *SERVICE, service=client)
    _, second, _ = simulate_cli(capsys, "--profile", "dual-agent", *SERVICE, service=client)

    assert metrics(first) == metrics(second) == metrics(in_process)
    seen = logged_cluster_ids(client, settings)
    assert len(seen) == 2
    assert all(FRESH.match(cluster_id) for cluster_id in seen)


def test_replays_under_one_given_cluster_id_share_its_state_in_the_service(
    client: TestClient, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    # What a fresh id per replay prevents: the second run starts from the GP the first
    # left, and goes elsewhere. Also: the id given is the one the service keeps.
    given = ("--profile", "dual-agent", "--cluster-id", "what-if-7", *SERVICE)
    _, in_process, _ = simulate_cli(capsys, "--profile", "dual-agent")
    _, first, _ = simulate_cli(capsys, *given, service=client)
    _, second, _ = simulate_cli(capsys, *given, service=client)

    assert metrics(first) == metrics(in_process)
    assert metrics(second) != metrics(first)
    assert logged_cluster_ids(client, settings) == {"what-if-7"}
    services = client.app.state.services  # type: ignore[attr-defined]
    assert services.decisions.load_state("what-if-7", ("rwgp",)).get("rwgp")


def test_each_profile_of_one_replay_gets_its_own_cluster_id(
    client: TestClient, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    profiles = ("--profile", "dual-agent", "--profile", "tiresias")
    _, in_process, _ = simulate_cli(capsys, *profiles)
    _, unnamed, unnamed_err = simulate_cli(capsys, *profiles, *SERVICE, service=client)
    fresh = logged_cluster_ids(client, settings)
    _, named, _ = simulate_cli(
        capsys, *profiles, "--cluster-id", "what-if", *SERVICE, service=client
    )

    assert metrics(unnamed) == metrics(named) == metrics(in_process)
    assert len(fresh) == 2
    assert all(FRESH.match(cluster_id) for cluster_id in fresh)
    assert logged_cluster_ids(client, settings) - fresh == {
        "what-if-dual-agent",
        "what-if-tiresias",
    }
    assert unnamed_err == ""  # --json: nothing but the JSON object, and no note


def test_the_cluster_id_changes_no_metric_in_process(capsys: pytest.CaptureFixture[str]) -> None:
    # `random` draws its placements, `dual-agent` learns machine speeds drawn per seed:
    # none of it is seeded from the cluster id.
    profiles = ("--profile", "dual-agent", "--profile", "random")
    _, plain, _ = simulate_cli(capsys, *profiles)
    _, named, _ = simulate_cli(capsys, *profiles, "--cluster-id", "elsewhere")

    assert metrics(named) == metrics(plain)


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (("--cluster-id", ""), "is empty; the snapshot schema's `cluster_id` takes 1 to 255"),
        (("--cluster-id", "c" * 256), "is 256 characters long; the snapshot schema's"),
        (("--cluster-id", "c" * 256, *SERVICE), "is 256 characters long"),
        # Through a service each of several profiles gets `<ID>-<profile>`: that must fit.
        (
            ("--cluster-id", "c" * 250, "--profile", "tiresias", *SERVICE),
            "(the id and a profile's name, one per profile run) is 261 characters long",
        ),
        (
            ("--cluster-id", "c", "--profile", "dual-agent", *SERVICE),
            "profile 'dual-agent' is given twice",
        ),
    ],
    ids=["empty", "too-long", "too-long-via-http", "derived-too-long", "repeated-profile"],
)
def test_a_bad_cluster_id_is_a_clear_error_naming_the_option(
    client: TestClient, capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], says: str
) -> None:
    status, _, err = simulate_cli(capsys, "--profile", "dual-agent", *argv, service=client)

    assert status == 2
    assert err.startswith("arbiter simulate: error: --cluster-id: ")
    assert says in err
    assert "Traceback" not in err
    assert err.count("\n") == 1


def test_fresh_cluster_ids_fit_the_schema_whatever_the_spec_name() -> None:
    short = fresh_cluster_id("philly")
    long = fresh_cluster_id("p" * 400)

    assert re.fullmatch(r"sim-philly-[0-9a-f]{8}", short)
    assert len(long) == 255
    assert long.startswith("sim-ppp")
    assert fresh_cluster_id("philly") != short
    assert run_cluster_ids(["a", "b"], "philly", chosen=None, via_service=False) == [
        "philly",
        "philly",
    ]
