"""Model versions of learned policies: list them, roll forward or back.

Activation is committed in the database (the source of truth) and announced on
the cache's `arbiter:models` channel so that replicas swap without restart.
"""

from __future__ import annotations

import orjson
from sqlalchemy.orm import Session, sessionmaker

from app.errors import NotFoundError
from app.schemas import ModelVersionOut
from storage.cache import Cache
from storage.models import ModelVersion
from storage.repositories import ModelVersionNotFoundError, ModelVersionRepository

MODELS_CHANNEL = "arbiter:models"


def _out(row: ModelVersion) -> ModelVersionOut:
    return ModelVersionOut(
        policy=row.policy,
        version=row.version,
        active=row.active,
        created_at=row.created_at,
        metadata=row.meta,
    )


class ModelService:
    def __init__(self, sessions: sessionmaker[Session], cache: Cache) -> None:
        self.sessions = sessions
        self.cache = cache

    def list_versions(self, policy: str | None = None) -> list[ModelVersionOut]:
        with self.sessions() as session:
            return [_out(row) for row in ModelVersionRepository(session).list(policy)]

    def activate(self, policy: str, version: str) -> ModelVersionOut:
        with self.sessions.begin() as session:
            try:
                row = ModelVersionRepository(session).activate(policy, version)
            except ModelVersionNotFoundError as error:
                raise NotFoundError(str(error)) from error
            out = _out(row)
        self.cache.publish(MODELS_CHANNEL, orjson.dumps({"policy": policy, "version": version}))
        return out
