"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from fastapi import APIRouter
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from starlette.responses import Response

from app.deps import ServicesDep
from app.schemas import Health, Readiness

router = APIRouter(tags=["operations"])


@router.get("/healthz", name="healthz", response_model=Health)
async def healthz() -> Health:
    return Health(status="ok")


@router.get("/readyz", name="readyz", response_model=Readiness)
def readyz(services: ServicesDep) -> Readiness:
    return services.health.readiness()


@router.get(
    "/metrics",
    name="metrics",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}, "description": "Prometheus exposition."}},
)
def metrics(services: ServicesDep) -> Response:
    return Response(generate_latest(services.metrics.registry), media_type=CONTENT_TYPE_LATEST)
