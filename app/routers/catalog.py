"""GET /v1/profiles and /v1/policies: what can be asked for."""

from __future__ import annotations

from fastapi import APIRouter

from app.deps import ServicesDep
from app.errors import error_responses
from app.schemas import PolicyOut, ProfileOut

router = APIRouter(prefix="/v1", tags=["catalog"])


@router.get("/profiles", name="list_profiles", response_model=list[ProfileOut])
def list_profiles(services: ServicesDep) -> list[ProfileOut]:
    return services.catalog.list_profiles()


@router.get(
    "/profiles/{name}",
    name="get_profile",
    response_model=ProfileOut,
    responses=error_responses(404),
)
def get_profile(name: str, services: ServicesDep) -> ProfileOut:
    return services.catalog.get_profile(name)


@router.get("/policies", name="list_policies", response_model=list[PolicyOut])
def list_policies(services: ServicesDep) -> list[PolicyOut]:
    return services.catalog.list_policies()
