"""Profiles, policies, health, readiness, metrics and the OpenAPI spec."""

from __future__ import annotations

import json
import re

from fastapi.testclient import TestClient
from prometheus_client import generate_latest

from app.metrics import Metrics
from policies.registry import build_registry
from simulator.deciders import EngineDecider, shipped_profiles
from tests.api.conftest import small_snapshot


def test_profiles_lists_objects_with_name_and_stages(client: TestClient) -> None:
    profiles = client.get("/v1/profiles").json()

    names = {p["name"] for p in profiles}
    assert {"fifo", "sjf", "srtf", "tiresias", "drf", "optimus"} <= names
    tiresias = next(p for p in profiles if p["name"] == "tiresias")
    assert tiresias["stages"]["ordering"]["name"] == "tiresias"
    assert set(tiresias["stages"]) == {
        "admission",
        "ordering",
        "scaling",
        "placement",
        "reclaim",
        "dispatch",
    }


def test_single_profile_and_unknown_profile(client: TestClient) -> None:
    assert client.get("/v1/profiles/drf").json()["stages"]["scaling"]["name"] == "drf"
    missing = client.get("/v1/profiles/nope")
    assert missing.status_code == 404
    assert missing.json()["error"] == "not_found"


def test_each_profile_says_whether_it_settles_and_gathers_as_its_engine_does(
    client: TestClient,
) -> None:
    # Both tell a caller which rounds it may skip or must ask; the simulator reads the
    # same two answers from the engine.
    registry = build_registry()
    profiles = client.get("/v1/profiles").json()
    shipped = shipped_profiles(registry)
    for listed in profiles:
        engine = EngineDecider(shipped[listed["name"]], registry)
        assert listed["settles"] is engine.settles, listed["name"]
        assert listed["gathers"] is engine.gathers, listed["name"]
    settles = {p["name"] for p in profiles if p["settles"]}
    assert "fifo" in settles
    assert "tiresias" not in settles
    assert {p["name"] for p in profiles if p["gathers"]} == {"tiresias"}


def test_each_profile_says_whether_it_learns_from_feedback_as_its_engine_does(
    client: TestClient,
) -> None:
    # A caller (the simulator's HTTP decider among them) reports throughput only to a
    # profile whose policy folds it into the cluster's state.
    registry = build_registry()
    profiles = client.get("/v1/profiles").json()
    shipped = shipped_profiles(registry)
    for listed in profiles:
        engine = EngineDecider(shipped[listed["name"]], registry)
        assert listed["learns_from_feedback"] is engine.learns_from_feedback, listed["name"]
    assert {p["name"] for p in profiles if p["learns_from_feedback"]} == {"dual-agent"}
    assert client.get("/v1/profiles/dual-agent").json()["learns_from_feedback"] is True
    schema = client.get("/openapi.json").json()["components"]["schemas"]["ProfileOut"]
    assert schema["properties"]["learns_from_feedback"]["type"] == "boolean"
    assert schema["properties"]["learns_from_feedback"]["description"]
    assert {"settles", "gathers", "learns_from_feedback"} <= set(schema["required"])


def test_policies_lists_every_registered_policy_with_params_schema(client: TestClient) -> None:
    policies = client.get("/v1/policies").json()

    listed = {(p["stage"], p["name"]) for p in policies}
    registered = {(s.stage.value, s.name) for s in build_registry().specs()}
    assert listed == registered
    fifo = next(p for p in policies if p["name"] == "fifo")
    assert "backfill" in fifo["params_schema"]["properties"]
    assert fifo["source"]


def test_healthz_and_readyz_report_components(client: TestClient) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}

    ready = client.get("/readyz").json()

    assert ready["status"] == "ready"
    assert ready["components"]["database"]["ok"] is True
    assert ready["components"]["cache"]["detail"] == "memory"


def test_metrics_count_decisions_by_profile(client: TestClient) -> None:
    client.post("/v1/decisions", json={"profile": "fifo", "snapshot": small_snapshot()})

    text = client.get("/metrics").text

    assert 'arbiter_decisions_total{endpoint="decisions",profile="fifo"} 1.0' in text
    assert "arbiter_decision_seconds_bucket" in text
    assert "arbiter_log_written" in text


def test_metrics_keep_counting_each_profile_and_endpoint_apart() -> None:
    metrics = Metrics()
    metrics.decided("fifo", "decisions", 0.001, fell_back=False)
    metrics.decided("fifo", "decisions", 0.004, fell_back=True)
    metrics.decided("fifo", "decisions/ordering", 0.002, fell_back=False)
    metrics.decided("drf", "decisions", 0.5, fell_back=False)

    text = generate_latest(metrics.registry).decode()

    assert 'arbiter_decisions_total{endpoint="decisions",profile="fifo"} 2.0' in text
    assert 'arbiter_decisions_total{endpoint="decisions/ordering",profile="fifo"} 1.0' in text
    assert 'arbiter_decisions_total{endpoint="decisions",profile="drf"} 1.0' in text
    # The time of every decision of a profile, whatever its endpoint.
    assert 'arbiter_decision_seconds_count{profile="fifo"} 3.0' in text
    assert 'arbiter_decision_seconds_sum{profile="fifo"} 0.007' in text
    assert 'arbiter_decision_seconds_count{profile="drf"} 1.0' in text
    assert 'arbiter_fallbacks_total{profile="fifo"} 1.0' in text
    assert 'arbiter_fallbacks_total{profile="drf"}' not in text


def test_openapi_is_complete_with_stable_operation_ids(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()

    operations = {
        op["operationId"]: (path, method)
        for path, methods in spec["paths"].items()
        for method, op in methods.items()
    }
    assert {
        "create_decision",
        "create_admission_decision",
        "create_ordering_decision",
        "create_scaling_decision",
        "create_placement_decision",
        "post_feedback",
        "list_profiles",
        "list_policies",
        "healthz",
        "readyz",
        "metrics",
        "list_model_versions",
        "activate_model_version",
        "list_trainers",
        "start_retrain",
        "get_retrain",
        "drop_cluster_state",
    } <= set(operations)
    assert operations["drop_cluster_state"] == ("/admin/clusters/{cluster_id}/state", "delete")
    decide = spec["paths"]["/v1/decisions"]["post"]
    body = decide["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/DecisionRequest"}
    assert body["example"]["profile"] == "tiresias"
    assert {"404", "413", "422", "500"} <= set(decide["responses"])
    schemas = spec["components"]["schemas"]
    for name in ("DecisionRequest", "Snapshot", "Job", "Node", "Decision", "ErrorOut"):
        assert name in schemas, name
    _assert_refs_resolve(spec, spec)


def _assert_refs_resolve(spec: object, root: dict[str, object]) -> None:
    if isinstance(spec, dict):
        ref = spec.get("$ref")
        if isinstance(ref, str):
            name = ref.removeprefix("#/components/schemas/")
            schemas = root["components"]["schemas"]  # type: ignore[index]
            assert name in schemas, f"dangling $ref {ref}"
        for value in spec.values():
            _assert_refs_resolve(value, root)
    elif isinstance(spec, list):
        for value in spec:
            _assert_refs_resolve(value, root)


def test_docs_render_from_assets_the_service_serves_itself(client: TestClient) -> None:
    page = client.get("/docs")
    assert page.status_code == 200
    html = page.text
    assert "cdn" not in html.lower()  # nothing to fetch from elsewhere: works offline
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/docs/assets/{asset}" in html
        served = client.get(f"/docs/assets/{asset}")
        assert served.status_code == 200
        assert len(served.content) > 10_000  # the real bundle, not a placeholder
    assert "/openapi.json" in html


def test_every_snapshot_field_is_described_in_the_spec(client: TestClient) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]
    undescribed: list[str] = []
    seen: set[str] = set()

    def walk(name: str) -> None:
        if name in seen:
            return
        seen.add(name)
        for field, schema in schemas[name].get("properties", {}).items():
            if not schema.get("description"):
                undescribed.append(f"{name}.{field}")
            for ref in re.findall(r"#/components/schemas/(\w+)", json.dumps(schema)):
                walk(ref)

    walk("Snapshot")
    assert {"Snapshot", "Job", "Node", "Tenant", "Assignment", "StepUtility"} <= seen
    assert undescribed == []
