"""POST /v1/dispatch: which sub-accelerator starts each inference request's next layer.

Raw-body fast path like the decision endpoints, off the event loop like them; the
request and response schemas are declared by reference so generated clients still see
the full models.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.deps import ServicesDep, caller_of
from app.errors import error_responses

router = APIRouter(prefix="/v1", tags=["dispatch"])

_LAYER = {
    "costs": [
        {"style": "ws", "latency_s": 0.0004, "bandwidth_gbps": 180.0, "energy_j": 0.0001},
        {"style": "rs", "latency_s": 0.0021, "bandwidth_gbps": 12.0, "energy_j": 0.00015},
    ]
}
_EXAMPLE_SNAPSHOT: dict[str, Any] = {
    "system_id": "demo",
    "now": 1.0,
    "dram_bandwidth_gbps": 256.0,
    "accelerators": [
        {"id": "ws0", "style": "ws"},
        {
            "id": "rs0",
            "style": "rs",
            "running": {"request_id": "a", "layer": 1, "remaining_s": 0.001},
        },
    ],
    "models": [{"name": "tiny", "layers": [_LAYER, _LAYER, _LAYER]}],
    "tenants": [{"id": "gold", "priority": 2.0}, {"id": "bronze"}],
    "requests": [
        {
            "id": "a",
            "tenant": "gold",
            "model": "tiny",
            "next_layer": 1,
            "arrival": 0.99,
            "deadline": 1.01,
        },
        {"id": "b", "tenant": "bronze", "model": "tiny", "arrival": 0.995, "deadline": 1.02},
    ],
}


@router.post(
    "/dispatch",
    name="create_dispatch",
    summary="Dispatch inference requests' next layers onto sub-accelerators",
    description=(
        "The snapshot describes the accelerator system (sub-accelerators with their "
        "dataflow style and what each runs, the shared DRAM bandwidth, the cost of every "
        "layer of every model on each style) and the pending requests. The answer starts "
        "at most one layer per idle sub-accelerator (`starts`, in start order), gives "
        "every request one entry with one reason (started, running or waiting), and lists "
        "the requests that can no longer meet their deadline (`late`); those are still "
        "served. See docs/relmas.md."
    ),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": "#/components/schemas/DispatchRequestBody"},
                    "example": {"profile": "edf", "snapshot": _EXAMPLE_SNAPSHOT},
                }
            },
        }
    },
    responses={
        200: {
            "description": "Starts in order, one entry per request, late requests.",
            "content": {
                "application/json": {"schema": {"$ref": "#/components/schemas/DispatchDecision"}}
            },
        },
        **error_responses(404, 413, 415, 422, 500),
    },
    response_class=Response,
)
async def create_dispatch(request: Request, services: ServicesDep) -> Response:
    body = await request.body()
    answer = await services.threads.run(services.dispatch.dispatch, body, caller_of(request))
    return Response(answer, media_type="application/json")
