"""Admin endpoints (bearer token `ARBITER_ADMIN_TOKEN`; disabled when unset)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Response
from starlette.convertors import Convertor, register_url_convertor

from app.deps import AdminDep, ServicesDep
from app.errors import ErrorOut, error_responses
from app.schemas import (
    ActivateRequest,
    ClusterStateDroppedOut,
    ModelVersionOut,
    RetrainJobOut,
    RetrainRequest,
    TrainerOut,
)

router = APIRouter(prefix="/admin", tags=["admin"])


class AnyText(Convertor[str]):
    """A path parameter that may hold any text, `/` and line breaks included: a snapshot's
    `cluster_id` is any string of 1 to 255 characters, and Starlette's own `path`
    convertor (`.*`) stops at a line break, so such a cluster's route would not match
    (a 404 the spec does not document) instead of being reached or validated."""

    regex = r"[\s\S]*"

    def convert(self, value: str) -> str:
        return value

    def to_string(self, value: str) -> str:
        return value


# Registered by name, once, before the routes below are compiled (Starlette keeps one
# table of convertors for every app; registering again replaces it with its equal).
register_url_convertor("text", AnyText())


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


@router.delete(
    # `:text`: a cluster id may hold a `/` (sent as `%2F`) or a line break, as the snapshot
    # schema allows.
    "/clusters/{cluster_id:text}/state",
    name="drop_cluster_state",
    response_model=ClusterStateDroppedOut,
    responses={
        **error_responses(401, 403, 422),
        422: {
            "model": ErrorOut,
            "description": "A `key` no served profile uses (the known ones listed), or an "
            "empty or overlong cluster id; each problem names its parameter.",
        },
    },
)
def drop_cluster_state(
    cluster_id: Annotated[
        str, Path(min_length=1, max_length=255, description="The snapshots' `cluster_id`.")
    ],
    _: AdminDep,
    services: ServicesDep,
    key: Annotated[
        list[str] | None,
        Query(
            description=(
                "Drop only these policy state keys (repeatable, e.g. `rwgp` for the dual "
                "agent's GP after a hardware change); a key no served profile uses is a 422 "
                "listing the known ones. Without it: every key and the learned event ids."
            ),
        ),
    ] = None,
) -> ClusterStateDroppedOut:
    """Drop a cluster's policy state, so that its next decision starts from empty state.

    Under the cluster's lock, between its rounds; idempotent (again: nothing dropped, 200).
    """
    dropped = services.decisions.drop_state(cluster_id, key)
    return ClusterStateDroppedOut(
        cluster_id=dropped.cluster_id, dropped=list(dropped.dropped), absent=list(dropped.absent)
    )
