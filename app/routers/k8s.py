"""The Kubernetes scheduler extender verbs under /k8s (see docs/integration.md).

`/k8s/{verb}` serves the cluster named by `ARBITER_K8S_CLUSTER_ID`;
`/k8s/{cluster_id}/{verb}` serves any other, so several clusters' schedulers can share
one Arbiter (each scheduler's `urlPrefix` names its cluster). Bodies are the extender
API types, with Go field names as keys; they are read raw and handled on a decision
thread, like every decision.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, Field
from starlette.responses import Response

from app.deps import ServicesDep
from app.errors import error_responses

router = APIRouter(prefix="/k8s", tags=["kubernetes"])

ClusterId = Annotated[
    str,
    Path(min_length=1, max_length=255, description="The cluster this scheduler serves."),
]


class NodesAccepted(BaseModel):
    nodes: int = Field(description="Nodes taken into the cluster's view.")


def _body(schema: str, example: dict[str, Any]) -> dict[str, Any]:
    return {
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": f"#/components/schemas/{schema}"},
                    "example": example,
                }
            },
        }
    }


def _ok(schema: dict[str, Any], description: str) -> dict[int | str, dict[str, Any]]:
    return {200: {"description": description, "content": {"application/json": {"schema": schema}}}}


_POD = {
    "metadata": {
        "name": "train-0",
        "namespace": "ml",
        "uid": "0b6f2c5e-0000-4000-8000-000000000001",
        "labels": {"arbiter.io/job": "resnet", "arbiter.io/gang-size": "2"},
    },
    "spec": {"containers": [{"name": "main", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
}
_ARGS = {"Pod": _POD, "NodeNames": ["gpu-0", "gpu-1"]}

_VERBS: dict[str, dict[str, Any]] = {
    "filter": {
        "summary": "Filter: the nodes where Arbiter's plan puts the pod",
        "description": (
            "ExtenderArgs → ExtenderFilterResult. With `Nodes` (nodeCacheCapable: false) the "
            "answer lists the kept node objects in `Nodes`; with `NodeNames` (true), their "
            "names in `NodeNames`. Every problem, an unreadable payload included, is "
            "reported in `Error` with a 200, as the scheduler expects."
        ),
        "openapi_extra": _body("ExtenderArgs", _ARGS),
        "responses": {
            **_ok(
                {"$ref": "#/components/schemas/ExtenderFilterResult"},
                "Kept nodes, failed nodes with reasons, or the error.",
            ),
            **error_responses(413, 415),
        },
    },
    "prioritize": {
        "summary": "Prioritize: 0–10 per node, highest where the plan puts the pod",
        "description": (
            "ExtenderArgs → HostPriorityList. The type has no error field: an unreadable "
            "payload is a 422 (the scheduler counts any status but 200 as an error)."
        ),
        "openapi_extra": _body("ExtenderArgs", _ARGS),
        "responses": {
            **_ok(
                {"type": "array", "items": {"$ref": "#/components/schemas/HostPriority"}},
                "One score per candidate node.",
            ),
            **error_responses(413, 415, 422),
        },
    },
    "bind": {
        "summary": "Bind: record the binding (and bind through the Kubernetes API if set up)",
        "description": (
            "ExtenderBindingArgs → ExtenderBindingResult. The pod takes a slot of its "
            "job's plan on the node; every problem is reported in `Error` with a 200."
        ),
        "openapi_extra": _body(
            "ExtenderBindingArgs",
            {
                "PodName": "train-0",
                "PodNamespace": "ml",
                "PodUID": "0b6f2c5e-0000-4000-8000-000000000001",
                "Node": "gpu-0",
            },
        ),
        "responses": {
            **_ok(
                {"$ref": "#/components/schemas/ExtenderBindingResult"},
                "Empty `Error` when bound.",
            ),
            **error_responses(413, 415),
        },
    },
    "preempt": {
        "summary": "Preempt: victims from the profile's preemption, or its reclaim policy",
        "description": (
            "ExtenderPreemptionArgs → ExtenderPreemptionResult. A training pod keeps the "
            "nodes where the plan puts it, with the pods of the jobs the profile preempts; "
            "a serving pod (`arbiter.io/pool: inference`) keeps the loaned servers that "
            "the profile's reclaim policy returns at least cost. An unreadable payload "
            "is a 422."
        ),
        "openapi_extra": _body(
            "ExtenderPreemptionArgs",
            {"Pod": _POD, "NodeNameToMetaVictims": {"gpu-0": {"Pods": [], "NumPDBViolations": 0}}},
        ),
        "responses": {
            **_ok(
                {"$ref": "#/components/schemas/ExtenderPreemptionResult"},
                "Candidate nodes kept, with their victims.",
            ),
            **error_responses(413, 415, 422),
        },
    },
}

Verb = Callable[[str, bytes], bytes]


def _route(verb: str, pick: Callable[[ServicesDep], Verb]) -> None:
    spec = _VERBS[verb]

    async def default_cluster(request: Request, services: ServicesDep) -> Response:
        body = await request.body()
        cluster = services.settings.k8s_cluster_id
        answer = await services.threads.run(pick(services), cluster, body)
        return Response(answer, media_type="application/json")

    async def named_cluster(
        cluster_id: ClusterId, request: Request, services: ServicesDep
    ) -> Response:
        body = await request.body()
        answer = await services.threads.run(pick(services), cluster_id, body)
        return Response(answer, media_type="application/json")

    handlers: tuple[tuple[str, str, Callable[..., Awaitable[Response]]], ...] = (
        (f"/{verb}", f"k8s_{verb}", default_cluster),
        (f"/{{cluster_id}}/{verb}", f"k8s_cluster_{verb}", named_cluster),
    )
    for path, name, handler in handlers:
        router.add_api_route(
            path,
            handler,
            methods=["POST"],
            name=name,
            summary=spec["summary"],
            description=spec["description"],
            openapi_extra=spec["openapi_extra"],
            responses=spec["responses"],
            response_class=Response,
        )


_route("filter", lambda s: s.k8s.filter)
_route("prioritize", lambda s: s.k8s.prioritize)
_route("bind", lambda s: s.k8s.bind)
_route("preempt", lambda s: s.k8s.preempt)


@router.post(
    "/{cluster_id}/nodes",
    name="k8s_post_nodes",
    summary="Tell the extender about a cluster's nodes (a v1 NodeList)",
    description=(
        "For `nodeCacheCapable: true`, where the scheduler sends node names only: post "
        "`kubectl get nodes -o json` (or what an informer sees) now and then. Nodes "
        "not posted or seen again within ARBITER_K8S_VIEW_TTL_S are forgotten."
    ),
    status_code=202,
    response_model=NodesAccepted,
    openapi_extra=_body("NodeList", {"items": []}),
    responses=error_responses(413, 415, 422),
)
async def k8s_post_nodes(
    cluster_id: ClusterId, request: Request, services: ServicesDep
) -> NodesAccepted:
    body = await request.body()
    count = await services.threads.run(services.k8s.see_nodes, cluster_id, body)
    return NodesAccepted(nodes=count)
