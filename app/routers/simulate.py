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
_FROM_STATE: dict[str, Any] = {
    "snapshot": {
        "cluster_id": "demo",
        "now": 5000.0,
        "nodes": [
            {"id": "n0", "gpu_type": "V100", "gpus": 8},
            {"id": "n1", "gpu_type": "V100", "gpus": 8},
        ],
        "jobs": [
            {
                "id": "running",
                "state": "running",
                "workers": 4,
                "submit_time": 1000.0,
                "placement": [{"node_id": "n0", "gpu_indices": [0, 1, 2, 3]}],
                "estimated_duration_s": 3600.0,
                "total_work": 100.0,
                "work_done": 50.0,
            },
            {"id": "waiting", "workers": 16, "submit_time": 4000.0, "estimated_duration_s": 600.0},
        ],
    },
    "arrivals": [{"job_id": "next", "submit_time_s": 30, "num_gpus": 2, "duration_s": 60}],
    "profiles": ["fifo", "tiresias"],
}
EXAMPLES: dict[str, dict[str, Any]] = {
    "trace": {"summary": "A small trace on a cluster spec", "value": _EXAMPLE},
    "snapshot": {
        "summary": "The cluster's state now and the jobs to come",
        "value": _FROM_STATE,
    },
}


@router.post(
    "/simulate",
    name="create_simulation",
    summary="What-if: replay a small trace, or go on from the cluster's state, per profile",
    description=(
        "Runs the trace-driven simulator (the engine decisions use) on the given rows and "
        "cluster spec, or from a snapshot of the cluster now (its running jobs keep their "
        "GPUs) with the jobs to come as `arrivals`, once per profile on the same jobs and "
        "seed, and answers each profile's metrics, as `arbiter simulate --json` does. "
        "Runs in worker processes, never in the way of decisions; bounded by "
        "ARBITER_SIMULATE_MAX_JOBS rows (snapshot jobs and arrivals), "
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
                    "examples": EXAMPLES,
                }
            },
        }
    },
    responses=error_responses(404, 413, 415, 422, 503),
)
async def create_simulation(request: Request, services: ServicesDep) -> Any:
    body = await request.body()
    return await services.simulate.simulate(body)
