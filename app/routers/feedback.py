"""POST /v1/feedback: outcomes reported back by the cluster manager."""

from __future__ import annotations

from fastapi import APIRouter, Request

from app.deps import ServicesDep, caller_of
from app.errors import error_responses
from app.schemas import FeedbackAccepted

router = APIRouter(prefix="/v1", tags=["feedback"])


@router.post(
    "/feedback",
    name="post_feedback",
    summary="Report outcomes (job finished, throughput, inference latency); idempotent by event id",
    status_code=202,
    response_model=FeedbackAccepted,
    responses=error_responses(413, 415, 422),
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {"$ref": "#/components/schemas/FeedbackRequest"},
                    "example": {
                        "events": [
                            {
                                "event_id": "evt-1",
                                "kind": "job_finished",
                                "cluster_id": "demo",
                                "job_id": "j1",
                                "started_at": 100.0,
                                "finished_at": 3700.0,
                            }
                        ]
                    },
                }
            },
        }
    },
)
async def post_feedback(request: Request, services: ServicesDep) -> FeedbackAccepted:
    body = await request.body()
    accepted = await services.threads.run(services.feedback.accept, body, caller_of(request))
    return FeedbackAccepted(accepted=accepted)
