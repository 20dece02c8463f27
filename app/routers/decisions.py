"""POST /v1/decisions and the per-stage endpoints.

Bodies are read raw and validated straight from JSON (DESIGN §8: decoding is
most of a decision's cost); the OpenAPI request schema is declared explicitly
so generated clients still see the full snapshot model. The body is read on the
event loop; decoding and deciding run on a decision thread (:mod:`app.threads`).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from starlette.responses import Response

from app.deps import ServicesDep, caller_of
from app.errors import error_responses
from policies.decision import Decision, Stage

router = APIRouter(prefix="/v1", tags=["decisions"])

_ERRORS = error_responses(404, 413, 415, 422, 500)


def _body_schema(model: str, example_profile: str) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": f"#/components/schemas/{model}"},
                    "example": {
                        "profile": example_profile,
                        "snapshot": {
                            "cluster_id": "demo",
                            "now": 100.0,
                            "nodes": [{"id": "n0", "gpu_type": "V100", "gpus": 8}],
                            "jobs": [
                                {"id": "j1", "workers": 2, "submit_time": 10.0},
                                {"id": "j2", "workers": 4, "submit_time": 20.0},
                            ],
                        },
                    },
                }
            },
        }
    }


def _decision_response() -> dict[int | str, dict[str, Any]]:
    return {
        200: {
            "description": "The decision, with a reason for every job.",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Decision"}}},
        },
        **_ERRORS,
    }


@router.post(
    "/decisions",
    name="create_decision",
    summary="Decide admission, ordering, scaling and placement for a snapshot",
    openapi_extra=_body_schema("DecisionRequest", "tiresias"),
    responses=_decision_response(),
    response_class=Response,
)
async def create_decision(request: Request, services: ServicesDep) -> Response:
    body = await request.body()
    decision = await services.threads.run(services.decisions.decide, body, None, caller_of(request))
    return Response(decision, media_type="application/json")


def _stage_route(stage: Stage) -> None:
    async def handler(request: Request, services: ServicesDep) -> Response:
        body = await request.body()
        decision = await services.threads.run(
            services.decisions.decide, body, stage, caller_of(request)
        )
        return Response(decision, media_type="application/json")

    router.add_api_route(
        f"/decisions/{stage.value}",
        handler,
        methods=["POST"],
        name=f"create_{stage.value}_decision",
        summary=f"Run the {stage.value} stage (and its prerequisites) only",
        openapi_extra=_body_schema("StageDecisionRequest", "fifo"),
        responses=_decision_response(),
        response_class=Response,
    )


for _stage in (Stage.ADMISSION, Stage.ORDERING, Stage.SCALING, Stage.PLACEMENT):
    _stage_route(_stage)

DOCUMENTED_MODELS = (Decision,)
