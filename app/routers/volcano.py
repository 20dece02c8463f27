"""Volcano's extender plugin verbs under /volcano (see docs/integration.md).

`/volcano/{verb}` serves the cluster named by `ARBITER_VOLCANO_CLUSTER_ID`;
`/volcano/{cluster_id}/{verb}` any other. Bodies are the plugin's own JSON; every
verb runs on a decision thread. An unreadable body is a 422 (the plugin counts any
status but 200 as the extender's error, and `extender.ignorable` decides what then).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated

from fastapi import APIRouter, Path, Request
from starlette.responses import Response

from app.deps import ServicesDep
from app.errors import error_responses
from app.services.volcano import VolcanoExtender

router = APIRouter(prefix="/volcano", tags=["volcano"])

ClusterId = Annotated[
    str, Path(min_length=1, max_length=255, description="The cluster this scheduler serves.")
]

Verb = Callable[[VolcanoExtender], Callable[[str, bytes], bytes]]

# verb: (handler, request schema, response schema, summary)
_VERBS: dict[str, tuple[Verb, str, str, str]] = {
    "onSessionOpen": (
        lambda v: v.on_session_open,
        "OnSessionOpenRequest",
        "Empty",
        "A session opens: its jobs, nodes and queues become a snapshot; the engine plans once",
    ),
    "onSessionClose": (
        lambda v: v.on_session_close,
        "Empty",
        "Empty",
        "The session closes: its plan is dropped",
    ),
    "predicate": (
        lambda v: v.predicate,
        "PredicateRequest",
        "PredicateResponse",
        "Whether the plan puts one of the task's job's workers on the node",
    ),
    "prioritize": (
        lambda v: v.prioritize,
        "PrioritizeRequest",
        "PrioritizeResponse",
        "0-100 per node by the workers the plan puts there",
    ),
    "preemptable": (
        lambda v: v.preemptable,
        "EvictionRequest",
        "EvictionResponse",
        "The evictees whose jobs the profile preempts",
    ),
    "reclaimable": (
        lambda v: v.reclaimable,
        "EvictionRequest",
        "EvictionResponse",
        "The evictees on the loaned server the profile's reclaim policy returns",
    ),
    "jobEnqueueable": (
        lambda v: v.job_enqueueable,
        "JobRequest",
        "EnqueueResponse",
        "The profile's admission: Permit, or Reject while it defers or rejects the job",
    ),
    "queueOverused": (
        lambda v: v.queue_overused,
        "QueueOverusedRequest",
        "QueueOverusedResponse",
        "Whether the queue holds more GPUs than its weight's share",
    ),
    "jobReady": (
        lambda v: v.job_ready,
        "JobRequest",
        "ReadyResponse",
        "Whether the job has as many tasks allocated as the plan gives it workers",
    ),
}


def _route(verb: str) -> None:
    pick, request_schema, response_schema, summary = _VERBS[verb]

    async def default_cluster(request: Request, services: ServicesDep) -> Response:
        body = await request.body()
        cluster = services.settings.volcano_cluster_id
        answer = await services.threads.run(pick(services.volcano), cluster, body)
        return Response(answer, media_type="application/json")

    async def named_cluster(
        cluster_id: ClusterId, request: Request, services: ServicesDep
    ) -> Response:
        body = await request.body()
        answer = await services.threads.run(pick(services.volcano), cluster_id, body)
        return Response(answer, media_type="application/json")

    def ref(name: str) -> dict[str, str]:
        return {"$ref": f"#/components/schemas/{name}"}

    handlers: tuple[tuple[str, str, Callable[..., Awaitable[Response]]], ...] = (
        (f"/{verb}", f"volcano_{verb}", default_cluster),
        (f"/{{cluster_id}}/{verb}", f"volcano_cluster_{verb}", named_cluster),
    )
    for path, name, handler in handlers:
        router.add_api_route(
            path,
            handler,
            methods=["POST"],
            name=name,
            summary=summary,
            openapi_extra={
                "requestBody": {
                    "required": True,
                    "content": {"application/json": {"schema": ref(request_schema)}},
                }
            },
            responses={
                200: {
                    "description": "The plugin's answer.",
                    "content": {"application/json": {"schema": ref(response_schema)}},
                },
                **error_responses(413, 415, 422),
            },
            response_class=Response,
        )


for _verb in _VERBS:
    _route(_verb)
