"""Typed access to what the lifespan built, for routers (`Annotated` dependencies)."""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from app.errors import ForbiddenError, UnauthorizedError
from app.metrics import Metrics
from app.services.catalog import CatalogService
from app.services.decisions import DecisionService, FeedbackService
from app.services.dispatch import DispatchService
from app.services.health import HealthService
from app.services.k8s import KubeExtender
from app.services.models import ModelService
from app.services.reclaim import ReclaimService
from app.services.retrain import RetrainService
from app.services.simulate import SimulateService
from app.services.volcano import VolcanoExtender
from app.settings import Settings
from app.threads import DecisionThreads


@dataclass
class Services:
    settings: Settings
    metrics: Metrics
    decisions: DecisionService
    reclaim: ReclaimService
    feedback: FeedbackService
    catalog: CatalogService
    health: HealthService
    models: ModelService
    retrain: RetrainService
    threads: DecisionThreads  # where the raw-body routes run their service calls
    dispatch: DispatchService
    k8s: KubeExtender
    simulate: SimulateService
    volcano: VolcanoExtender


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


ServicesDep = Annotated[Services, Depends(_services)]


def require_admin(request: Request, services: ServicesDep) -> None:
    """Bearer-token check of the admin endpoints; disabled when no token is configured."""
    expected = services.settings.admin_token
    if expected is None:
        raise ForbiddenError("admin endpoints are disabled: ARBITER_ADMIN_TOKEN is not set")
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise UnauthorizedError("missing bearer token")
    if not hmac.compare_digest(token.encode(), expected.encode()):
        raise ForbiddenError("wrong admin token")


AdminDep = Annotated[None, Depends(require_admin)]


def caller_of(request: Request) -> str | None:
    """The caller `ARBITER_API_TOKENS` names for this request (None without tokens)."""
    # Read off the request's state, where ApiTokenMiddleware puts it: asking Starlette's
    # `request.state` for an attribute it lacks raises and catches an exception, on
    # every request of a service without tokens.
    state = request.scope.get("state")
    caller = state.get("caller") if isinstance(state, Mapping) else None
    return caller if isinstance(caller, str) else None
