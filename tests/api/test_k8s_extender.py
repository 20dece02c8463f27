"""The Kubernetes scheduler extender, driven as kube-scheduler drives it.

Pods and nodes are built with the official `kubernetes` client's models and serialised
as the API server sends them (`ApiClient().sanitize_for_serialization`: camelCase keys,
no nulls); the extender's own types use Go field names as keys.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from kubernetes.client import (
    ApiClient,
    V1Container,
    V1Node,
    V1NodeCondition,
    V1NodeList,
    V1NodeSpec,
    V1NodeStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodSpec,
    V1ResourceRequirements,
)

from app.main import create_app
from app.settings import Settings

SERIALISER = ApiClient()


def wire(obj: object) -> Any:
    """An object as the API server (and so kube-scheduler) writes it in JSON."""
    return SERIALISER.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]


def meta(obj: V1Pod | V1Node) -> V1ObjectMeta:
    assert obj.metadata is not None
    return obj.metadata


def uid(p: V1Pod) -> str:
    return str(meta(p).uid)


def node(name: str, gpus: int, labels: dict[str, str] | None = None, ready: bool = True) -> V1Node:
    resources = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "512Gi", "pods": "110"}
    return V1Node(
        api_version="v1",
        kind="Node",
        metadata=V1ObjectMeta(
            name=name,
            uid=f"uid-{name}",
            labels={"nvidia.com/gpu.product": "Tesla-V100", **(labels or {})},
        ),
        spec=V1NodeSpec(),
        status=V1NodeStatus(
            capacity=resources,
            allocatable=resources,
            conditions=[
                V1NodeCondition(type="Ready", status="True" if ready else "False"),
            ],
        ),
    )


def pod(
    name: str,
    gpus: int,
    labels: dict[str, str] | None = None,
    namespace: str = "ml",
    created: str = "2026-11-24T03:00:00Z",
) -> V1Pod:
    limits = {"nvidia.com/gpu": str(gpus)} if gpus else {}
    return V1Pod(
        api_version="v1",
        kind="Pod",
        metadata=V1ObjectMeta(
            name=name,
            namespace=namespace,
            uid=f"uid-{namespace}-{name}",
            labels=labels or {},
            creation_timestamp=created,
        ),
        spec=V1PodSpec(
            containers=[
                V1Container(
                    name="main",
                    image="trainer:1",
                    resources=V1ResourceRequirements(
                        limits=limits, requests={**limits, "cpu": "4", "memory": "16Gi"}
                    ),
                )
            ]
        ),
    )


NODES = [node("gpu-0", 4), node("gpu-1", 4), node("gpu-2", 8)]


def gang(job: str, size: int, gpus: int, **extra: str) -> list[V1Pod]:
    labels = {"arbiter.io/job": job, "arbiter.io/gang-size": str(size), **extra}
    return [pod(f"{job}-{i}", gpus, labels) for i in range(size)]


@pytest.fixture
def cluster_settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
        k8s_profile="fifo-backfill",
    )


@pytest.fixture
def k8s(cluster_settings: Settings) -> Iterator[TestClient]:
    with TestClient(create_app(cluster_settings)) as client:
        yield client


def args(p: V1Pod, nodes: list[V1Node] | None = None, cached: bool = False) -> dict[str, Any]:
    """ExtenderArgs: the node objects, or (nodeCacheCapable) their names only."""
    listed = nodes if nodes is not None else NODES
    if cached:
        return {"Pod": wire(p), "NodeNames": [meta(n).name for n in listed]}
    return {"Pod": wire(p), "Nodes": wire(V1NodeList(items=listed, metadata={}))}


def filtered(client: TestClient, p: V1Pod, cached: bool = False, cluster: str = "") -> Any:
    prefix = f"/k8s/{cluster}/" if cluster else "/k8s/"
    response = client.post(prefix + "filter", json=args(p, cached=cached))
    assert response.status_code == 200
    return response.json()


def kept(result: Any) -> list[str]:
    if result["NodeNames"] is not None:
        return list(result["NodeNames"])
    return [item["metadata"]["name"] for item in result["Nodes"]["items"]]


def bind(client: TestClient, p: V1Pod, node_name: str, cluster: str = "") -> str:
    prefix = f"/k8s/{cluster}/" if cluster else "/k8s/"
    response = client.post(
        prefix + "bind",
        json={
            "PodName": meta(p).name,
            "PodNamespace": meta(p).namespace,
            "PodUID": uid(p),
            "Node": node_name,
        },
    )
    assert response.status_code == 200
    error: str = response.json()["Error"]
    return error


def schedule(client: TestClient, p: V1Pod, cached: bool = False) -> str | None:
    """filter → prioritize → bind to the best node, as kube-scheduler would."""
    result = filtered(client, p, cached)
    assert result["Error"] == ""
    nodes = kept(result)
    if not nodes:
        return None
    scored = client.post("/k8s/prioritize", json=args(p, cached=cached)).json()
    best = max((s for s in scored if s["Host"] in nodes), key=lambda s: s["Score"])["Host"]
    assert bind(client, p, best) == ""
    return str(best)


@pytest.mark.parametrize("cached", [False, True])
def test_filter_keeps_the_nodes_where_the_plan_puts_the_pod_in_both_cache_modes(
    k8s: TestClient, cached: bool
) -> None:
    if cached:  # nodeCacheCapable: the scheduler sends names; the nodes come from the cluster
        posted = k8s.post("/k8s/kubernetes/nodes", json=wire(V1NodeList(items=NODES)))
        assert posted.status_code == 202
        assert posted.json() == {"nodes": 3}
    wide = pod("wide", 8)  # only gpu-2 has 8 GPUs
    result = filtered(k8s, wide, cached)
    assert result["Error"] == ""
    assert kept(result) == ["gpu-2"]
    if cached:
        assert result["Nodes"] is None
    else:
        assert result["NodeNames"] is None
        # the kept node is the scheduler's own object, handed back as it came
        assert result["Nodes"]["items"][0] == wire(NODES[2])
    assert "needs 8" in result["FailedAndUnresolvableNodes"]["gpu-0"]


def test_filter_without_the_nodes_in_cache_mode_says_which_are_unknown(k8s: TestClient) -> None:
    result = filtered(k8s, pod("lonely", 1), cached=True)
    assert kept(result) == []
    assert "unknown to Arbiter" in result["FailedNodes"]["gpu-0"]


def test_prioritize_scores_the_planned_node_highest_within_zero_to_ten(k8s: TestClient) -> None:
    wide = pod("wide", 8)
    scores = k8s.post("/k8s/prioritize", json=args(wide)).json()
    assert {s["Host"] for s in scores} == {"gpu-0", "gpu-1", "gpu-2"}
    assert all(0 <= s["Score"] <= 10 for s in scores)
    assert max(scores, key=lambda s: s["Score"]) == {"Host": "gpu-2", "Score": 10}


@pytest.mark.parametrize("cached", [False, True])
def test_a_gang_lands_whole_on_the_plan_slots_and_its_gpus_are_not_given_twice(
    k8s: TestClient, cached: bool
) -> None:
    if cached:
        k8s.post("/k8s/kubernetes/nodes", json=wire(V1NodeList(items=NODES)))
    first = gang("resnet", 4, 4)  # 16 GPUs: all three nodes
    placed = [schedule(k8s, p, cached) for p in first]
    assert sorted(n for n in placed if n) == ["gpu-0", "gpu-1", "gpu-2", "gpu-2"]
    # the cluster is full: the next pod is kept off every node, with the plan's reason
    late = pod("late", 1)
    result = filtered(k8s, late, cached)
    assert kept(result) == []
    assert "pending" in result["FailedNodes"]["gpu-0"]


def test_a_gang_that_cannot_fit_whole_gets_no_node_for_any_of_its_pods(k8s: TestClient) -> None:
    too_big = gang("bert", 3, 8)  # 24 GPUs, 16 exist... and only one node has 8
    for p in too_big:
        result = filtered(k8s, p)
        assert kept(result) == [], "a gang is all or nothing"
        assert all("bert" in why for why in result["FailedNodes"].values())
    # a smaller job behind it still runs (backfill)
    assert schedule(k8s, pod("small", 2)) is not None


def test_a_pod_beyond_its_gangs_slots_is_told_it_is_surplus(k8s: TestClient) -> None:
    pair = gang("pair", 2, 4)
    for p in pair:
        assert schedule(k8s, p) is not None
    extra = pod("pair-2", 4, {"arbiter.io/job": "pair", "arbiter.io/gang-size": "2"})
    result = filtered(k8s, extra)
    assert kept(result) == []
    assert "surplus" in result["FailedNodes"]["gpu-0"]


def test_a_pod_without_gpus_is_left_to_the_scheduler(k8s: TestClient) -> None:
    result = filtered(k8s, pod("web", 0))
    assert sorted(kept(result)) == ["gpu-0", "gpu-1", "gpu-2"]


def test_binding_a_pod_arbiter_never_saw_is_refused_with_the_reason(k8s: TestClient) -> None:
    error = bind(k8s, pod("stranger", 1), "gpu-0")
    assert "unknown to Arbiter" in error
    assert "stranger" in error


def test_binding_twice_to_the_same_node_is_idempotent_and_elsewhere_refused(
    k8s: TestClient,
) -> None:
    one = pod("one", 4)
    where = schedule(k8s, one)
    assert where is not None
    assert bind(k8s, one, where) == ""
    other = next(str(meta(n).name) for n in NODES if meta(n).name != where)
    assert "already bound" in bind(k8s, one, other)


def test_binding_beyond_a_nodes_gpus_is_refused(k8s: TestClient) -> None:
    first, second = pod("a", 4), pod("b", 4)
    filtered(k8s, first)
    filtered(k8s, second)
    assert bind(k8s, first, "gpu-0") == ""
    assert "has fewer than 4 free GPUs" in bind(k8s, second, "gpu-0")


@pytest.mark.parametrize(
    ("verb", "body"),
    [
        ("filter", b"{not json"),
        ("filter", b'{"Pod": "a string", "NodeNames": []}'),
        ("filter", b'{"NodeNames": ["gpu-0"]}'),
        ("bind", b'{"PodUID": 7}'),
        ("bind", b"[]"),
    ],
)
def test_malformed_payloads_get_the_verbs_own_error_field(
    k8s: TestClient, verb: str, body: bytes
) -> None:
    response = k8s.post(f"/k8s/{verb}", content=body, headers={"content-type": "application/json"})
    assert response.status_code == 200
    assert response.json()["Error"] != ""


def test_a_bad_label_is_named_in_the_error(k8s: TestClient) -> None:
    bad = pod("bad", 1, {"arbiter.io/gang-size": "many"})
    result = filtered(k8s, bad)
    assert "arbiter.io/gang-size" in result["Error"]
    assert "'many'" in result["Error"]


@pytest.mark.parametrize("verb", ["prioritize", "preempt"])
def test_malformed_payloads_of_verbs_without_an_error_field_are_a_422(
    k8s: TestClient, verb: str
) -> None:
    response = k8s.post(
        f"/k8s/{verb}", content=b'{"Pod": []}', headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"] == "invalid_request"
    assert [p["path"] for p in response.json()["problems"]] == ["Pod"]


@pytest.mark.parametrize("verb", ["prioritize", "preempt"])
def test_a_payload_without_a_pod_is_a_422_naming_the_pod(k8s: TestClient, verb: str) -> None:
    response = k8s.post(f"/k8s/{verb}", json={"NodeNames": ["gpu-0"]})

    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == "Pod"
    assert "missing required field `Pod`" in response.json()["detail"]


def test_filter_without_a_pod_answers_in_band_naming_the_pod(k8s: TestClient) -> None:
    # The filter verb has an `Error` field: the scheduler reads failures there, not in
    # the status.
    response = k8s.post("/k8s/filter", json={"NodeNames": ["gpu-0"]})

    assert response.status_code == 200
    assert response.json()["Error"] == (
        "invalid ExtenderArgs at Pod: Object missing required field `Pod`"
    )


def test_the_spec_lists_the_pod_as_required(k8s: TestClient) -> None:
    schemas = k8s.get("/openapi.json").json()["components"]["schemas"]

    assert schemas["ExtenderArgs"]["required"] == ["Pod"]
    assert schemas["ExtenderPreemptionArgs"]["required"] == ["Pod"]


def test_clusters_are_kept_apart(k8s: TestClient) -> None:
    wide = pod("wide", 8)
    filtered(k8s, wide, cluster="east")
    assert bind(k8s, wide, "gpu-2", cluster="east") == ""
    # the same node names in another cluster are still free
    other = pod("other", 8)
    assert kept(filtered(k8s, other, cluster="west")) == ["gpu-2"]
    assert kept(filtered(k8s, other, cluster="east")) == []


def app_with(tmp_path: Path, profile: str) -> TestClient:
    return TestClient(
        create_app(
            Settings(
                database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
                redis_url=None,
                spill_dir=tmp_path / "spill",
                log_flush_interval_s=0.05,
                k8s_profile=profile,
            )
        )
    )


def filtered_on(client: TestClient, p: V1Pod, nodes: list[V1Node]) -> list[str]:
    response = client.post("/k8s/filter", json=args(p, nodes))
    assert response.json()["Error"] == ""
    return kept(response.json())


@pytest.mark.parametrize("cached", [False, True])
def test_preempt_names_the_pods_of_the_jobs_the_profile_preempts(
    tmp_path: Path, cached: bool
) -> None:
    only = [node("gpu-0", 4)]
    long_job = pod("long", 4, {"arbiter.io/estimated-duration-s": "100000"})
    short_job = pod("short", 4, {"arbiter.io/estimated-duration-s": "60"})
    with app_with(tmp_path, "srtf") as client:
        assert filtered_on(client, long_job, only) == ["gpu-0"]
        assert bind(client, long_job, "gpu-0") == ""
        # SRTF preempts the long job for the short one: the plan puts it on gpu-0 ...
        assert filtered_on(client, short_job, only) == ["gpu-0"]
        # ... kube-scheduler's own GPU count says no, so it asks for victims
        victims: dict[str, Any]
        if cached:
            victims = {
                "NodeNameToMetaVictims": {
                    "gpu-0": {"Pods": [{"UID": uid(long_job)}], "NumPDBViolations": 0}
                }
            }
        else:
            victims = {
                "NodeNameToVictims": {"gpu-0": {"Pods": [wire(long_job)], "NumPDBViolations": 0}}
            }
        response = client.post("/k8s/preempt", json={"Pod": wire(short_job), **victims})
        assert response.status_code == 200
        assert response.json() == {
            "NodeNameToMetaVictims": {
                "gpu-0": {"Pods": [{"UID": uid(long_job)}], "NumPDBViolations": 0}
            }
        }
        # once the victim is evicted, the short job binds where it was promised
        assert bind(client, short_job, "gpu-0") == ""


def test_a_profile_that_does_not_preempt_offers_no_victims(tmp_path: Path) -> None:
    only = [node("gpu-0", 4)]
    first, second = pod("first", 4), pod("second", 4)
    with app_with(tmp_path, "fifo") as client:
        filtered_on(client, first, only)
        assert bind(client, first, "gpu-0") == ""
        assert filtered_on(client, second, only) == []
        response = client.post(
            "/k8s/preempt",
            json={
                "Pod": wire(second),
                "NodeNameToMetaVictims": {"gpu-0": {"Pods": [{"UID": uid(first)}]}},
            },
        )
        assert response.json() == {"NodeNameToMetaVictims": {}}


def test_a_serving_pod_reclaims_the_loaned_server_that_costs_least(tmp_path: Path) -> None:
    """Aryl: returning the server with an elastic job's extra worker shrinks that job (cost
    0); returning the one with a rigid job would preempt it (cost 1)."""
    loaned = {"arbiter.io/pool": "inference", "arbiter.io/loaned": "true"}
    nodes = [node("t0", 4), node("i0", 4, loaned), node("i1", 4, loaned)]
    elastic = gang("elastic", 2, 4, **{"arbiter.io/min-workers": "1"})
    rigid = pod("rigid", 4)
    serving = pod("serve", 4, {"arbiter.io/pool": "inference"})
    with app_with(tmp_path, "aryl") as client:
        # Placed by hand: bind is the scheduler's word, on the plan or not, while the
        # node has the GPUs free.
        for p, target in ((elastic[0], "t0"), (elastic[1], "i0"), (rigid, "i1")):
            filtered_on(client, p, nodes)
            assert bind(client, p, target) == "", target
        # the serving pod is kept off the busy loaned servers and the training node
        result = client.post("/k8s/filter", json=args(serving, nodes)).json()
        assert kept(result) == []
        assert "reclaiming" in result["FailedNodes"]["i0"]
        assert "training node" in result["FailedAndUnresolvableNodes"]["t0"]
        response = client.post(
            "/k8s/preempt",
            json={
                "Pod": wire(serving),
                "NodeNameToVictims": {
                    "i0": {"Pods": [wire(elastic[1])], "NumPDBViolations": 0},
                    "i1": {"Pods": [wire(rigid)], "NumPDBViolations": 0},
                },
            },
        )
        assert response.json() == {
            "NodeNameToMetaVictims": {
                "i0": {"Pods": [{"UID": uid(elastic[1])}], "NumPDBViolations": 0}
            }
        }


def test_job_finished_feedback_frees_the_jobs_gpus(k8s: TestClient) -> None:
    only = [node("gpu-0", 4)]
    done, waiting = pod("done", 4), pod("waiting", 4)
    filtered_on(k8s, done, only)
    assert bind(k8s, done, "gpu-0") == ""
    assert filtered_on(k8s, waiting, only) == []
    feedback = {
        "events": [
            {
                "event_id": "k8s-done-1",
                "kind": "job_finished",
                "cluster_id": "kubernetes",
                "job_id": "ml/done",
                "finished_at": 100.0,
            }
        ]
    }
    assert k8s.post("/v1/feedback", json=feedback).status_code == 202
    assert filtered_on(k8s, waiting, only) == ["gpu-0"]


def test_the_view_lives_in_redis_and_survives_a_restart(
    tmp_path: Path, redis_url: str, redis_prefix: str
) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=redis_url,
        redis_prefix=redis_prefix,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
    )
    only = [node("gpu-0", 4)]
    first, second = pod("first", 4), pod("second", 4)
    with TestClient(create_app(settings)) as client:
        filtered_on(client, first, only)
        assert bind(client, first, "gpu-0") == ""
    with TestClient(create_app(settings)) as restarted:
        # the new process knows gpu-0's GPUs are taken, and by whom
        result = restarted.post("/k8s/filter", json=args(second, only)).json()
        assert kept(result) == []
        assert bind(restarted, first, "gpu-0") == ""  # the same binding again: done already
