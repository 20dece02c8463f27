"""Liveness and readiness: what answers, and what is degraded."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from sqlalchemy import Engine, text

from app.schemas import ComponentStatus, Readiness
from app.services.models import ActiveModels
from storage.cache import Cache


class HealthService:
    def __init__(
        self,
        engine: Engine,
        cache: Cache,
        log_stats: Callable[[], Mapping[str, object]],
        profiles: int,
        models: ActiveModels | None = None,
        *,
        log_stall_limit_s: float = 60.0,
    ) -> None:
        self.log_stall_limit_s = log_stall_limit_s
        self.engine = engine
        self.cache = cache
        self.log_stats = log_stats
        self.profiles = profiles
        self.models = models

    def readiness(self) -> Readiness:
        """Ready while decisions can be answered; a database or Redis outage only degrades."""
        components = {
            "database": self._database(),
            "cache": self._cache(),
            "policies": ComponentStatus(
                ok=self.profiles > 0, detail=f"{self.profiles} profiles loaded"
            ),
        }
        if self.models is not None:
            components["models"] = self._models(self.models)
        status = "ready" if all(c.ok for c in components.values()) else "degraded"
        return Readiness(status=status, components=components)

    def _database(self) -> ComponentStatus:
        stats = self.log_stats()
        buffered, spilled = stats.get("buffered", 0), stats.get("spill_pending", 0)
        try:
            with self.engine.connect() as connection:
                connection.execute(text("SELECT 1"))
        except Exception as error:
            return ComponentStatus(
                ok=False,
                detail=(
                    f"unreachable ({type(error).__name__}); decisions go on, the log buffers "
                    f"({buffered} in memory, {spilled} spilled)"
                ),
            )
        stalled = stats.get("stalled_s", 0.0)
        if isinstance(stalled, int | float) and stalled > self.log_stall_limit_s:
            return ComponentStatus(
                ok=False,
                detail=(
                    f"reachable, but the decision log has written nothing for {stalled:.0f} s "
                    f"({buffered} records in memory, {spilled} spilled); decisions go on"
                ),
            )
        return ComponentStatus(
            ok=True,
            detail=f"{self.engine.dialect.name}, {stats.get('buffered', 0)} log records buffered",
        )

    def _cache(self) -> ComponentStatus:
        if self.cache.ping():
            return ComponentStatus(ok=True, detail=self.cache.backend)
        return ComponentStatus(
            ok=False, detail=f"{self.cache.backend} unreachable; serving from memory"
        )

    @staticmethod
    def _models(models: ActiveModels) -> ComponentStatus:
        """Which version each learned policy serves; a missing one means the shipped model."""
        sources = models.sources()
        parts = [
            f"{policy}: {version} (from {sources[policy]})"
            if version is not None
            else f"{policy}: shipped model"
            for policy, version in sorted(models.versions().items())
        ]
        return ComponentStatus(ok=True, detail="; ".join(parts) or "no learned policy")
