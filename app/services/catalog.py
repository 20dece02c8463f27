"""What can be asked for: profiles and policies, with their parameter schemas."""

from __future__ import annotations

from app.errors import NotFoundError
from app.schemas import PolicyChoiceOut, PolicyOut, ProfileOut
from policies.decision import ENGINE_STAGES, Stage
from policies.profiles import Profile
from policies.registry import Registry


class CatalogService:
    def __init__(self, registry: Registry, profiles: dict[str, Profile]) -> None:
        self.registry = registry
        self.profiles = profiles

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
        for spec in self.registry.specs():
            info = spec.info
            out.append(
                PolicyOut(
                    name=info.name,
                    stage=info.stage,
                    version=info.version,
                    summary=info.summary,
                    source=info.source,
                    params_schema=spec.params_schema(),
                )
            )
        return out

    @staticmethod
    def _profile(profile: Profile) -> ProfileOut:
        return ProfileOut(
            name=profile.name,
            description=profile.description,
            stages={
                s.value: PolicyChoiceOut(
                    name=profile.choice(s).name, params=profile.choice(s).params
                )
                for s in (*ENGINE_STAGES, Stage.RECLAIM)
            },
            fallback={
                s.value: PolicyChoiceOut(name=c.name, params=c.params)
                for s, c in profile.fallback.items()
            },
        )
