"""POST /v1/simulate: what-if runs of the simulator, in worker processes (DESIGN §4)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from app.deps import ServicesDep
from app.errors import error_responses
from app.schemas import SimulateResponse

router = APIRouter(prefix="/v1", tags=["simulate"])

_EXAMPLE: dict[str, Any] = {
    "trace": [
        {"job_id": "a", "submit_time_s": 0, "num_gpus": 4, "duration_s": 3600},
        {"job_id": "b", "submit_time_s": 60, "num_gpus": 8, "duration_s": 600},
        {"job_id": "c", "submit_time_s": 120, "num_gpus": 2, "duration_s": 60},
    ],
    "cluster": {
        "name": "demo",
        "node_groups": [
            {
                "count": 2,
                "gpus": 8,
                "gpu_type": "V100",
                "gpu_memory_gb": 32,
                "cpus": 64,
                "memory_gb": 512,
                "rack_size": 2,
                "price_per_gpu_hour": 2.48,
            }
        ],
    },
    "profiles": ["fifo", "tiresias"],
}


@router.post(
    "/simulate",
    name="create_simulation",
    summary="What-if: replay a small trace on a cluster under one or more profiles",
    description=(
        "Runs the trace-driven simulator (the engine decisions use) on the given rows and "
        "cluster spec, once per profile on the same jobs and seed, and answers each "
        "profile's metrics, as `arbiter simulate --json` does. Runs in worker processes, "
        "never in the way of decisions; bounded by ARBITER_SIMULATE_MAX_JOBS rows, "
        "ARBITER_SIMULATE_MAX_PROFILES profiles and ARBITER_SIMULATE_TIMEOUT_S seconds "
        "(a 422 names the limit)."
    ),
    response_model=SimulateResponse,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": "#/components/schemas/SimulateRequest"},
                    "example": _EXAMPLE,
                }
            },
        }
    },
    responses=error_responses(404, 413, 415, 422, 503),
)
async def create_simulation(request: Request, services: ServicesDep) -> Any:
    body = await request.body()
    return await services.simulate.simulate(body)
