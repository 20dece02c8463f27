"""A job whose tenant the snapshot does not list: served, as documented, as a tenant of
weight 1 with no GPU quota (the `tenant` and `tenants` field descriptions,
docs/integration.md), and the decision's reason says so."""

from __future__ import annotations

from typing import Any

from fastapi.testclient import TestClient


def _snapshot(tenant: str) -> dict[str, Any]:
    return {
        "cluster_id": "tenants",
        "now": 100.0,
        "nodes": [{"id": "n0", "gpu_type": "V100", "gpus": 8}],
        "jobs": [{"id": "j", "tenant": tenant, "workers": 4, "submit_time": 10.0}],
        "tenants": [{"id": "capped", "gpu_quota": 0}],
    }


def _admission(client: TestClient, tenant: str) -> dict[str, Any]:
    body = {"profile": "quota", "snapshot": _snapshot(tenant), "stages": ["admission"]}
    response = client.post("/v1/decisions", json=body)
    assert response.status_code == 200, response.text
    (entry,) = response.json()["admission"]
    return dict(entry)


def test_a_job_of_an_unlisted_tenant_is_accepted_as_one_with_no_quota(
    client: TestClient,
) -> None:
    entry = _admission(client, "nobody-listed")

    assert entry["verdict"] == "admit"
    assert entry["reason"] == "tenant 'nobody-listed' has no GPU quota"


def test_a_listed_tenant_keeps_its_quota_beside_it(client: TestClient) -> None:
    entry = _admission(client, "capped")

    assert entry["verdict"] != "admit"


def test_the_snapshot_schema_says_what_happens_to_an_unlisted_tenant(
    client: TestClient,
) -> None:
    schemas = client.get("/openapi.json").json()["components"]["schemas"]

    assert "not listed" in schemas["Job"]["properties"]["tenant"]["description"]
    assert "not listed" in schemas["Snapshot"]["properties"]["tenants"]["description"]
