"""Admin endpoints (bearer token `ARBITER_ADMIN_TOKEN`; disabled when unset)."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.deps import AdminDep, ServicesDep
from app.errors import error_responses
from app.schemas import (
    ActivateRequest,
    ModelVersionOut,
    RetrainJobOut,
    RetrainRequest,
    TrainerOut,
)

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


@router.get(
    "/trainers",
    name="list_trainers",
    response_model=list[TrainerOut],
    responses=error_responses(401, 403),
)
def list_trainers(_: AdminDep, services: ServicesDep) -> list[TrainerOut]:
    """The learned policies `POST /admin/retrain` takes, each with its budget's schema."""
    return services.retrain.trainer_catalog()


@router.post(
    "/retrain",
    name="start_retrain",
    status_code=202,
    response_model=RetrainJobOut,
    responses=error_responses(401, 403, 409, 415, 422, 429, 503),
)
def start_retrain(
    body: RetrainRequest, _: AdminDep, services: ServicesDep, response: Response
) -> RetrainJobOut:
    """Queue a retraining of a learned policy; poll the job at the `Location` it returns."""
    job = services.retrain.start(body)
    response.headers["Location"] = f"/admin/retrain/{job.id}"
    return job


@router.get(
    "/retrain/{job_id}",
    name="get_retrain",
    response_model=RetrainJobOut,
    responses=error_responses(401, 403, 404, 503),
)
def get_retrain(job_id: str, _: AdminDep, services: ServicesDep) -> RetrainJobOut:
    """A retraining job: status, progress, and once done its version, metrics or error."""
    return services.retrain.get(job_id)
