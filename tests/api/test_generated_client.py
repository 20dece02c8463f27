"""A Python client generated from the served spec works unmodified against a live server.

The client is generated with `openapi-python-client` (no generator warning allowed) into
a temporary package, imported as it is, and used over real HTTP against uvicorn on a
loopback port: every public endpoint, and the admin ones with the admin token.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import uvicorn

from app.main import create_app
from app.settings import Settings
from tests.servers import free_port

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TOKEN = "generated-client-admin-token"
PACKAGE = "arbiter_generated_client"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, dict[str, Any]]]:
    workdir = tmp_path_factory.mktemp("client-server")
    app = create_app(
        Settings(
            database_url=f"sqlite:///{workdir / 'arbiter.db'}",
            redis_url=None,
            spill_dir=workdir / "spill",
            admin_token=TOKEN,
            log_flush_interval_s=0.05,
        )
    )
    port = free_port()
    live = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    )
    thread = threading.Thread(target=live.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not live.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            pytest.fail("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}", app.openapi()
    finally:
        live.should_exit = True
        thread.join(timeout=30)


@pytest.fixture(scope="module")
def client_package(
    server: tuple[str, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ModuleType]:
    workdir = tmp_path_factory.mktemp("generated")
    spec = workdir / "openapi.json"
    spec.write_text(json.dumps(server[1]))
    bin_dir = Path(sys.executable).parent
    generated = subprocess.run(
        [
            str(bin_dir / "openapi-python-client"),
            "generate",
            "--path",
            str(spec),
            "--meta",
            "none",
            "--output-path",
            str(workdir / PACKAGE),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        # The generator formats its output with ruff, which it looks for on PATH.
        env={**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"},
        check=False,
    )
    output = generated.stdout + generated.stderr
    assert generated.returncode == 0, output
    assert "warning" not in output.lower(), output
    sys.path.insert(0, str(workdir))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(workdir))
        for name in [n for n in sys.modules if n.startswith(PACKAGE)]:
            del sys.modules[name]


def module(name: str) -> Any:
    return importlib.import_module(f"{PACKAGE}.{name}")


def example(name: str) -> Any:
    return json.loads((EXAMPLES / name).read_text())


def test_every_public_endpoint_through_the_generated_client(
    client_package: ModuleType, server: tuple[str, dict[str, Any]]
) -> None:
    models = module("models")
    client = client_package.AuthenticatedClient(base_url=server[0], token=TOKEN, timeout=60)
    snapshot = example("small.json")

    def ok(response: Any, kind: Any, status: int = 200) -> Any:
        assert response.status_code == status, response.content
        assert isinstance(response.parsed, kind), response.parsed
        return response.parsed

    decision = ok(
        module("api.decisions.create_decision").sync_detailed(
            client=client,
            body=models.DecisionRequest.from_dict({"profile": "tiresias", "snapshot": snapshot}),
        ),
        models.Decision,
    )
    assert decision.profile == "tiresias"
    for stage in ("admission", "ordering", "scaling", "placement"):
        ok(
            module(f"api.decisions.create_{stage}_decision").sync_detailed(
                client=client,
                body=models.StageDecisionRequest.from_dict(
                    {"profile": "fifo", "snapshot": snapshot}
                ),
            ),
            models.Decision,
        )
    ok(
        module("api.reclaim.create_reclaim").sync_detailed(
            client=client, body=models.ReclaimRequestBody.from_dict(example("reclaim.json"))
        ),
        models.ReclaimDecision,
    )
    dispatched = ok(
        module("api.dispatch.create_dispatch").sync_detailed(
            client=client, body=models.DispatchRequestBody.from_dict(example("dispatch.json"))
        ),
        models.DispatchDecision,
    )
    assert dispatched.profile == "relmas"
    accepted = ok(
        module("api.feedback.post_feedback").sync_detailed(
            client=client,
            body=models.FeedbackRequest.from_dict(
                {
                    "events": [
                        {
                            "event_id": "generated-1",
                            "kind": "job_finished",
                            "job_id": "j1",
                            "finished_at": 10.0,
                        }
                    ]
                }
            ),
        ),
        models.FeedbackAccepted,
        202,
    )
    assert accepted.accepted == 1
    simulate_examples = server[1]["paths"]["/v1/simulate"]["post"]["requestBody"]["content"][
        "application/json"
    ]["examples"]
    for form in ("trace", "snapshot"):  # a trace on a cluster; the cluster now and arrivals
        simulated = ok(
            module("api.simulate.create_simulation").sync_detailed(
                client=client,
                body=models.SimulateRequest.from_dict(simulate_examples[form]["value"]),
            ),
            models.SimulateResponse,
        )
        assert [r.profile for r in simulated.results] == ["fifo", "tiresias"]
    profiles = ok(module("api.catalog.list_profiles").sync_detailed(client=client), list)
    assert "tiresias" in {p.name for p in profiles}
    ok(module("api.catalog.get_profile").sync_detailed("fifo", client=client), models.ProfileOut)
    unknown = module("api.catalog.get_profile").sync_detailed("nope", client=client)
    assert unknown.status_code == 404
    assert isinstance(unknown.parsed, models.ErrorOut)
    ok(module("api.catalog.list_policies").sync_detailed(client=client), list)
    ok(module("api.operations.healthz").sync_detailed(client=client), models.Health)
    ok(module("api.operations.readyz").sync_detailed(client=client), models.Readiness)
    metrics = module("api.operations.metrics").sync_detailed(client=client)
    assert metrics.status_code == 200
    assert b"arbiter_" in metrics.content
    pod = {
        "metadata": {"name": "p", "namespace": "ml", "uid": "u-1"},
        "spec": {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
    }
    filtered = ok(
        module("api.kubernetes.k8s_filter").sync_detailed(
            client=client,
            body=models.ExtenderArgs.from_dict({"Pod": pod, "NodeNames": ["n0"]}),
        ),
        models.ExtenderFilterResult,
    )
    assert filtered.error == ""
    ready = ok(
        module("api.volcano.volcano_job_ready").sync_detailed(
            client=client, body=models.JobRequest.from_dict({"job": {"UID": "ml/j"}})
        ),
        models.ReadyResponse,
    )
    assert ready.status is True


def test_admin_endpoints_through_the_generated_client(
    client_package: ModuleType, server: tuple[str, dict[str, Any]]
) -> None:
    models = module("models")
    client = client_package.AuthenticatedClient(base_url=server[0], token=TOKEN, timeout=60)
    versions = module("api.admin.list_model_versions").sync_detailed(client=client)
    assert versions.status_code == 200
    assert isinstance(versions.parsed, list)
    trainers = module("api.admin.list_trainers").sync_detailed(client=client)
    assert trainers.status_code == 200
    assert "dl2" in {t.name for t in trainers.parsed}
    missing = module("api.admin.get_retrain").sync_detailed("no-such-job", client=client)
    assert missing.status_code == 404
    assert isinstance(missing.parsed, models.ErrorOut)
    refused = module("api.admin.activate_model_version").sync_detailed(
        "dl2", client=client, body=models.ActivateRequest.from_dict({"version": "no-such"})
    )
    assert refused.status_code == 404
    assert isinstance(refused.parsed, models.ErrorOut)
    unknown_policy = module("api.admin.start_retrain").sync_detailed(
        client=client, body=models.RetrainRequest.from_dict({"policy": "no-such-policy"})
    )
    assert unknown_policy.status_code in {404, 422}
    assert isinstance(unknown_policy.parsed, models.ErrorOut)
    nothing_kept = module("api.admin.drop_cluster_state").sync_detailed(
        "never-decided", client=client
    )
    assert nothing_kept.status_code == 200
    assert isinstance(nothing_kept.parsed, models.ClusterStateDroppedOut)
    assert nothing_kept.parsed.dropped == []
    unknown_key = module("api.admin.drop_cluster_state").sync_detailed(
        "never-decided", client=client, key=["no-such-key"]
    )
    assert unknown_key.status_code == 422
    assert isinstance(unknown_key.parsed, models.ErrorOut)
    wrong = client_package.AuthenticatedClient(base_url=server[0], token="wrong-token-value")
    forbidden = module("api.admin.list_model_versions").sync_detailed(client=wrong)
    assert forbidden.status_code == 403
