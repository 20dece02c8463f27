"""POST /v1/reclaim: which loaned servers go back to inference, and what that costs training.

Raw-body fast path like the decision endpoints, off the event loop like them; the request
and response schemas are declared by reference so generated clients still see the full models.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.deps import ServicesDep, caller_of
from app.errors import error_responses

router = APIRouter(prefix="/v1", tags=["reclaim"])

_EXAMPLE_SNAPSHOT: dict[str, Any] = {
    "cluster_id": "demo",
    "now": 100.0,
    "nodes": [
        {"id": "t0", "gpu_type": "V100", "gpus": 8},
        {"id": "i0", "gpu_type": "T4", "gpus": 4, "pool": "inference", "loaned": True},
        {"id": "i1", "gpu_type": "T4", "gpus": 4, "pool": "inference", "loaned": True},
    ],
    "jobs": [
        {
            "id": "elastic",
            "state": "running",
            "workers": 4,
            "min_workers": 4,
            "max_workers": 8,
            "placement": [
                {"node_id": "t0", "gpu_indices": [0, 1, 2, 3]},
                {"node_id": "i0", "gpu_indices": [0, 1]},
            ],
        },
        {
            "id": "rigid",
            "state": "running",
            "workers": 2,
            "placement": [{"node_id": "i1", "gpu_indices": [0, 1]}],
        },
    ],
}


@router.post(
    "/reclaim",
    name="create_reclaim",
    summary="Choose loaned servers to give back to inference, with the jobs shrunk or preempted",
    description=(
        "Give `count` (the profile's reclaim policy picks that many loaned servers) or "
        "`node_ids` (exactly these; the answer says what returning them does), not both. "
        "Jobs with GPUs on a returned server shrink to a worker count they accept on the "
        "GPUs they keep, or are preempted when none fits; `cost` counts the preempted jobs."
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": "#/components/schemas/ReclaimRequestBody"},
                    "example": {"profile": "aryl", "count": 1, "snapshot": _EXAMPLE_SNAPSHOT},
                }
            },
        }
    },
    responses={
        200: {
            "description": "The servers to return, jobs to shrink and preempt, cost and reasons.",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/ReclaimDecision"}}
            },
        },
        **error_responses(404, 413, 415, 422, 500),
    },
    response_class=Response,
)
async def create_reclaim(request: Request, services: ServicesDep) -> Response:
    body = await request.body()
    answer = await services.threads.run(services.reclaim.reclaim, body, caller_of(request))
    return Response(answer, media_type="application/json")
