"""POST /v1/decisions and the per-stage endpoints.

Bodies are read raw and validated straight from JSON (DESIGN §8: decoding is
most of a decision's cost); the OpenAPI request schema is declared explicitly
so generated clients still see the full snapshot model. The body is read on the
event loop. A small body (`ARBITER_INLINE_MAX_BYTES`, 64 KiB by default:
`examples/small.json` is 16 KB) is decoded there, once, and under a stateless profile
decided there too, which costs less than the hop to a thread; a stateful profile's
decision (whose cluster lock may be held by a slow round) and every larger body run on a
decision thread (:mod:`app.threads`), so that a slow decision never holds the loop.

The hot path skips FastAPI's request handling: each endpoint below is a plain
`async def (request)`, registered twice with the same function: as a FastAPI route,
which only documents it in the OpenAPI spec, and as a Starlette route ahead of it
(:func:`fast_routes`), which serves it without dependency resolution. Errors take the
same exception handlers either way.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.routing import Route

from app.deps import Services, caller_of
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


Endpoint = Callable[[Request], Awaitable[Response]]
_FAST: list[tuple[str, Endpoint]] = []


async def _answer(request: Request, stage: Stage | None) -> Response:
    services: Services = request.app.state.services
    decisions = services.decisions
    try:
        body = await request.body()
    except ClientDisconnect:
        return Response(status_code=400)  # the caller is gone; nobody reads this
    caller = caller_of(request)
    if len(body) > decisions.inline_max_bytes:
        # Decoded on a decision thread too: a large snapshot takes milliseconds to read.
        encoded = await services.threads.run(decisions.decide, body, stage, caller)
    else:
        # Read once, here: a bad body is answered at once, and the profile says where
        # the decision runs. A stateful round waits for its cluster's lock, which a slow
        # round may hold, so it never runs on the loop.
        read = decisions.read(body, stage)
        if read.stateful:
            encoded = await services.threads.run(decisions.answer, read, body, caller)
        else:
            encoded = decisions.answer(read, body, caller)
    return Response(encoded, media_type="application/json")


async def create_decision(request: Request) -> Response:
    return await _answer(request, None)


router.add_api_route(
    "/decisions",
    create_decision,
    methods=["POST"],
    name="create_decision",
    summary="Decide admission, ordering, scaling and placement for a snapshot",
    openapi_extra=_body_schema("DecisionRequest", "tiresias"),
    responses=_decision_response(),
    response_class=Response,
)
_FAST.append(("/decisions", create_decision))


def _stage_route(stage: Stage) -> None:
    async def handler(request: Request) -> Response:
        return await _answer(request, stage)

    path = f"/decisions/{stage.value}"
    router.add_api_route(
        path,
        handler,
        methods=["POST"],
        name=f"create_{stage.value}_decision",
        summary=f"Run the {stage.value} stage (and its prerequisites) only",
        openapi_extra=_body_schema("StageDecisionRequest", "fifo"),
        responses=_decision_response(),
        response_class=Response,
    )
    _FAST.append((path, handler))


for _stage in (Stage.ADMISSION, Stage.ORDERING, Stage.SCALING, Stage.PLACEMENT):
    _stage_route(_stage)


def fast_routes() -> list[Route]:
    """Starlette routes serving the decision endpoints; the app puts them first."""
    return [
        Route(router.prefix + path, endpoint, methods=["POST"], include_in_schema=False)
        for path, endpoint in _FAST
    ]


DOCUMENTED_MODELS = (Decision,)
