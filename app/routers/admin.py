"""Admin endpoints (bearer token `ARBITER_ADMIN_TOKEN`; disabled when unset)."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import AdminDep, ServicesDep
from app.errors import error_responses
from app.schemas import ActivateRequest, ModelVersionOut

router = APIRouter(prefix="/admin", tags=["admin"])


@router.get(
    "/models",
    name="list_model_versions",
    response_model=list[ModelVersionOut],
    responses=error_responses(401, 403),
)
def list_model_versions(
    _: AdminDep, services: ServicesDep, policy: str | None = None
) -> list[ModelVersionOut]:
    return services.models.list_versions(policy)


@router.post(
    "/models/{name}/activate",
    name="activate_model_version",
    response_model=ModelVersionOut,
    responses=error_responses(401, 403, 404, 422),
)
def activate_model_version(
    name: str, body: ActivateRequest, _: AdminDep, services: ServicesDep
) -> ModelVersionOut:
    return services.models.activate(name, body.version)
