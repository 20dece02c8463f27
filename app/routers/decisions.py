"""POST /v1/decisions and the per-stage endpoints.

Bodies are read raw and validated straight from JSON (DESIGN §8: decoding is
most of a decision's cost); the OpenAPI request schema is declared explicitly
so generated clients still see the full snapshot model. The body is read on the
event loop. A small body (`ARBITER_INLINE_MAX_BYTES`, 64 KiB by default:
`examples/small.json` is 16 KB) is decoded there, once, and under a stateless profile
decided there too, which costs less than the hop to a thread; a stateful profile's
decision (whose cluster lock may be held by a slow round) and every larger body run on a
decision thread (:mod:`app.threads`), so that a slow decision never holds the loop.

The hot path skips FastAPI's request handling and the routing: each endpoint below is
a plain `async def (request)`, registered as a FastAPI route, which only documents it in
the OpenAPI spec, and served by :class:`DecisionEndpoints`, the app's innermost
middleware, ahead of the router. Errors take the same exception handlers either way.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from fastapi import APIRouter, Request
from starlette.requests import ClientDisconnect
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

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


class DecisionEndpoints:
    """Serves the decision endpoints (`POST /v1/decisions` and its stages) ahead of the
    routing, as the innermost middleware; every other request goes on to the app.

    Below it lie Starlette's exception middleware, FastAPI's exit-stack middleware, the
    router's match over every route and the route's request wrapper: layers awaited on
    every request, whose skipping served 3 to 5 % more small decisions a second with one
    worker (docs/benchmarks.md, "The decision endpoints ahead of the routing"). What
    those layers do for these endpoints is done here: the endpoint's exceptions go to
    the app's handlers, looked up the way Starlette looks them up (by the exception's
    classes in order); one with no handler propagates, to the server-error middleware's
    500, as it would there. The middlewares outside this one (body limit, content type,
    NUL, bearer token) still run first.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.endpoints = {router.prefix + path: endpoint for path, endpoint in _FAST}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        endpoint = self.endpoints.get(scope["path"]) if scope["type"] == "http" else None
        if endpoint is None or scope["method"] != "POST":
            # Anything else (another method's 405, say) is the router's.
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive, send)
        try:
            response = await endpoint(request)
        except Exception as exc:
            handler = _handler_for(scope["app"].exception_handlers, exc)
            if handler is None:
                raise
            answer = handler(request, exc)
            # A handler may be a plain function, as Starlette allows (ours are async).
            response = await answer if inspect.isawaitable(answer) else answer
        await response(scope, receive, send)


Handler = Callable[[Request, Exception], Awaitable[Response] | Response]


def _handler_for(handlers: Mapping[Any, Handler], exc: Exception) -> Handler | None:
    """The app's handler of `exc` as Starlette's exception middleware finds it; the
    handler of `Exception` itself (or of 500) is the server-error middleware's, left to
    it."""
    for kind in type(exc).__mro__:
        if kind is Exception:
            return None
        handler = handlers.get(kind)
        if handler is not None:
            return handler
    return None


DOCUMENTED_MODELS = (Decision,)
