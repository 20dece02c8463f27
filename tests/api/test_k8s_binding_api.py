"""The bind verb binding through the Kubernetes API (`ARBITER_K8S_KUBECONFIG`), with the
official client, against a stand-in API server that records what it is sent."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from tests.api.test_k8s_extender import bind, filtered, pod


class _ApiServer(BaseHTTPRequestHandler):
    """Answers a pod binding as the API server does (201 and a Status), or refuses it."""

    received: ClassVar[list[tuple[str, dict[str, Any]]]] = []
    refuse: ClassVar[bool] = False

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length", "0"))
        self.received.append((self.path, json.loads(self.rfile.read(length))))
        status = 409 if self.refuse else 201
        answer = {"kind": "Status", "apiVersion": "v1", "status": "Success"}
        if self.refuse:
            answer = {"kind": "Status", "status": "Failure", "reason": "Conflict"}
        body = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:  # quiet
        return


@pytest.fixture
def api_server() -> Iterator[str]:
    _ApiServer.received.clear()
    _ApiServer.refuse = False
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ApiServer)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def binding(tmp_path: Path, api_server: str) -> Iterator[TestClient]:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": api_server}}],
                "users": [{"name": "u", "user": {"token": "test-token"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'arbiter.db'}",
        redis_url=None,
        spill_dir=tmp_path / "spill",
        log_flush_interval_s=0.05,
        k8s_profile="fifo-backfill",
        k8s_kubeconfig=str(kubeconfig),
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_bind_posts_the_pods_binding_to_the_kubernetes_api(binding: TestClient) -> None:
    trainer = pod("trainer", 4)
    filtered(binding, trainer)

    assert bind(binding, trainer, "gpu-0") == ""

    ((path, sent),) = _ApiServer.received
    assert path == "/api/v1/namespaces/ml/bindings"  # the namespace's Binding resource
    assert sent["target"] == {"apiVersion": "v1", "kind": "Node", "name": "gpu-0"}
    assert sent["metadata"]["name"] == "trainer"


def test_a_binding_the_api_refuses_is_not_recorded_and_says_why(binding: TestClient) -> None:
    trainer = pod("trainer", 4)
    filtered(binding, trainer)
    _ApiServer.refuse = True

    error = bind(binding, trainer, "gpu-0")

    assert "the Kubernetes API refused the binding of ml/trainer" in error
    _ApiServer.refuse = False
    assert bind(binding, trainer, "gpu-0") == ""  # not recorded: a retry binds it
