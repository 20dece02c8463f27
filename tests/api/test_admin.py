"""Admin endpoints: token checks, listing and activating model versions."""

from __future__ import annotations

from pathlib import Path

from fastapi.testclient import TestClient

from app.main import create_app
from app.settings import Settings
from storage.db import create_engine_for, make_sessionmaker
from storage.repositories import ModelVersionRepository

TOKEN = "a-test-token-of-enough-length"


def _auth(token: str = TOKEN) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def test_admin_refuses_a_missing_token_with_401(client: TestClient) -> None:
    response = client.get("/admin/models")

    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response.headers["www-authenticate"] == "Bearer"


def test_admin_refuses_a_wrong_token_with_403(client: TestClient) -> None:
    response = client.get("/admin/models", headers=_auth("not-the-right-token-at-all"))

    assert response.status_code == 403
    assert response.json()["error"] == "forbidden"


def test_admin_is_disabled_without_a_configured_token(tmp_path: Path) -> None:
    settings = Settings(
        database_url=f"sqlite:///{tmp_path / 'a.db'}", admin_token=None, spill_dir=tmp_path
    )
    with TestClient(create_app(settings)) as client:
        response = client.get("/admin/models", headers=_auth())

    assert response.status_code == 403
    assert "disabled" in response.json()["detail"]


def test_admin_lists_and_activates_model_versions(client: TestClient, settings: Settings) -> None:
    engine = create_engine_for(settings.database_url)
    with make_sessionmaker(engine).begin() as session:
        repository = ModelVersionRepository(session)
        repository.add("dl2", "v1", b"weights-1", {"note": "first"}, activate=True)
        repository.add("dl2", "v2", b"weights-2", {"note": "second"})
    engine.dispose()

    listed = client.get("/admin/models", headers=_auth()).json()
    activated = client.post("/admin/models/dl2/activate", json={"version": "v2"}, headers=_auth())
    after = client.get("/admin/models", params={"policy": "dl2"}, headers=_auth()).json()

    assert [(m["version"], m["active"]) for m in listed] == [("v1", True), ("v2", False)]
    assert activated.status_code == 200
    assert activated.json()["active"] is True
    assert [(m["version"], m["active"]) for m in after] == [("v1", False), ("v2", True)]


def test_activating_an_unknown_version_is_404(client: TestClient) -> None:
    response = client.post("/admin/models/dl2/activate", json={"version": "v9"}, headers=_auth())

    assert response.status_code == 404
    assert "v9" in response.json()["detail"]


def test_activate_without_version_is_422(client: TestClient) -> None:
    response = client.post("/admin/models/dl2/activate", json={}, headers=_auth())

    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == "version"


def test_a_nul_in_a_query_parameter_is_422_not_a_server_error(client: TestClient) -> None:
    response = client.get("/admin/models?policy=%00", headers=_auth())

    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == "url"


def test_a_seed_beyond_31_bits_is_422_naming_it(client: TestClient) -> None:
    response = client.post("/admin/retrain", json={"policy": "dl2", "seed": 2**64}, headers=_auth())

    assert response.status_code == 422
    assert [p["path"] for p in response.json()["problems"]] == ["seed"]


def test_a_nul_in_an_admin_body_is_422_naming_it(client: TestClient) -> None:
    response = client.post(
        "/admin/retrain", json={"policy": "dl2", "profile": "fi\x00fo"}, headers=_auth()
    )

    assert response.status_code == 422
    assert [p["path"] for p in response.json()["problems"]] == ["profile"]


def test_the_spec_declares_the_admin_bearer_scheme_on_every_admin_operation(
    client: TestClient,
) -> None:
    spec = client.get("/openapi.json").json()

    assert spec["components"]["securitySchemes"]["adminToken"]["scheme"] == "bearer"
    admin = [ops for path, ops in spec["paths"].items() if path.startswith("/admin/")]
    assert admin
    for operations in admin:
        for operation in operations.values():
            assert operation["security"] == [{"adminToken": []}]
    assert spec["paths"]["/v1/decisions"]["post"]["security"] == [{}, {"apiToken": []}]


def test_a_body_that_is_not_even_text_is_422_like_any_bad_body(client: TestClient) -> None:
    response = client.post(
        "/admin/models/dl2/activate",
        content=b"\x1dY\xff\xfe7\x8aj",
        headers={**_auth(), "content-type": "application/json"},
    )

    assert response.status_code == 422
    assert response.json()["problems"][0]["path"] == "body"


def test_every_documented_422_has_the_one_error_shape(client: TestClient) -> None:
    spec = client.get("/openapi.json").json()

    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            invalid = operation.get("responses", {}).get("422")
            if invalid is not None:
                schema = invalid["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorOut"}, (path, method)
    assert "HTTPValidationError" not in spec["components"]["schemas"]
