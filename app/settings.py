"""Service settings, read from `ARBITER_*` environment variables.

Built once by whoever starts the service (`arbiter serve`, a test) and passed to
:func:`app.main.create_app`; nothing reads the environment at import time.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ARBITER_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///var/arbiter.db",
        description="SQLAlchemy URL; a plain postgresql:// URL works. Default: a SQLite file.",
    )
    redis_url: str | None = Field(
        default=None, description="Redis for model and policy state; unset: in-process cache."
    )
    admin_token: str | None = Field(
        default=None, description="Bearer token of the admin endpoints; unset disables them."
    )
    profiles_file: Path | None = Field(
        default=None, description="JSON or TOML file of extra (or overriding) profiles."
    )
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024, ge=1024, description="Larger request bodies get 413."
    )
    spill_dir: Path = Field(
        default=Path("var/spill"),
        description="Where the decision log spills when the database is away.",
    )
    log_buffer: int = Field(default=10_000, ge=1, description="Log records held in memory.")
    log_batch_size: int = Field(default=500, ge=1)
    log_flush_interval_s: float = Field(default=0.5, gt=0)
    migrate_on_start: bool = Field(
        default=True, description="Apply database migrations when the service starts."
    )

    @field_validator("admin_token")
    @classmethod
    def _token_strong_enough(cls, value: str | None) -> str | None:
        if value is not None and value != "" and len(value) < 16:
            raise ValueError("ARBITER_ADMIN_TOKEN must be at least 16 characters")
        return value or None

    @field_validator("redis_url")
    @classmethod
    def _empty_means_none(cls, value: str | None) -> str | None:
        return value or None
