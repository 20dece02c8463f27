"""What can be asked for: profiles and policies, with their parameter schemas."""

from __future__ import annotations

from app.errors import NotFoundError
from app.schemas import PolicyChoiceOut, PolicyOut, ProfileOut
from app.services.models import ActiveModels
from policies.decision import ENGINE_STAGES, Stage
from policies.profiles import Profile, profile_gathers, profile_settles
from policies.protocols import learned_model_key
from policies.registry import Registry


class CatalogService:
    def __init__(
        self,
        registry: Registry,
        profiles: dict[str, Profile],
        models: ActiveModels | None = None,
    ) -> None:
        self.registry = registry
        self.profiles = profiles
        self.models = models

    def list_profiles(self) -> list[ProfileOut]:
        return [self._profile(p) for p in sorted(self.profiles.values(), key=lambda p: p.name)]

    def get_profile(self, name: str) -> ProfileOut:
        profile = self.profiles.get(name)
        if profile is None:
            raise NotFoundError(
                f"unknown profile {name!r}; known: {', '.join(sorted(self.profiles))}"
            )
        return self._profile(profile)

    def list_policies(self) -> list[PolicyOut]:
        out = []
        versions = self.models.versions() if self.models is not None else {}
        for spec in self.registry.specs():
            info = spec.info
            key = learned_model_key(spec.cls)
            out.append(
                PolicyOut(
                    name=info.name,
                    stage=info.stage,
                    version=info.version,
                    summary=info.summary,
                    source=info.source,
                    params_schema=spec.params_schema(),
                    model_version=versions.get(key) if key is not None else None,
                )
            )
        return out

    def _profile(self, profile: Profile) -> ProfileOut:
        return ProfileOut(
            name=profile.name,
            description=profile.description,
            settles=profile_settles(profile, self.registry),
            gathers=profile_gathers(profile, self.registry),
            stages={
                s.value: PolicyChoiceOut(
                    name=profile.choice(s).name, params=profile.choice(s).params
                )
                for s in (*ENGINE_STAGES, Stage.RECLAIM, Stage.DISPATCH)
            },
            fallback={
                s.value: PolicyChoiceOut(name=c.name, params=c.params)
                for s, c in profile.fallback.items()
            },
        )
