"""A method a path does not serve is refused with 405 and the methods it does serve.

RFC 9110 §15.5.6: a 405 answer carries `Allow`, so that a client (or a proxy) learns
what the path accepts without reading the spec.
"""

from __future__ import annotations

from fastapi.testclient import TestClient

HTTP_METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def test_every_documented_path_answers_an_unserved_method_with_its_allowed_methods(
    client: TestClient,
) -> None:
    paths = client.get("/openapi.json").json()["paths"]
    checked = 0
    for template, operations in paths.items():
        path = template.replace("{cluster_id}", "demo").replace("{name}", "dl2")
        path = path.replace("{job_id}", "unknown").replace("{stage}", "ordering")
        assert "{" not in path, f"no value for a parameter of {template}"
        served = {m.upper() for m in operations if m in HTTP_METHODS}
        answer = client.request("TRACE", path)
        assert answer.status_code == 405, (template, answer.status_code)
        assert answer.json()["error"] == "method_not_allowed"
        allowed = {m.strip() for m in answer.headers["allow"].split(",")}
        # HEAD rides along with GET where the router adds it; every documented method is there.
        assert served <= allowed <= served | {"HEAD"}, (template, allowed, served)
        checked += 1
    assert checked >= 30


def test_a_wrong_method_on_the_decision_path_names_post(client: TestClient) -> None:
    answer = client.get("/v1/decisions")
    assert answer.status_code == 405
    assert answer.headers["allow"] == "POST"
    assert answer.json() == {
        "error": "method_not_allowed",
        "detail": "Method Not Allowed",
        "problems": [],
    }
