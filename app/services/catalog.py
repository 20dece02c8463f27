"""What can be asked for: profiles and policies, with their parameter schemas."""

from __future__ import annotations

from collections.abc import Callable

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
        learns_from_feedback: Callable[[str], bool] | None = None,
    ) -> None:
        """`learns_from_feedback(name)` asks the served pipeline of a profile (the decision
        service's, rebuilt when a model changes); without it no profile says it learns."""
        self.registry = registry
        self.profiles = profiles
        self.models = models
        self.learns_from_feedback = learns_from_feedback

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
            learns_from_feedback=(
                self.learns_from_feedback is not None and self.learns_from_feedback(profile.name)
            ),
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
