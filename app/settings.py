"""Service settings, read from `ARBITER_*` environment variables.

Built once by whoever starts the service (`arbiter serve`, a test) and passed to
:func:`app.main.create_app`; nothing reads the environment at import time.
"""

from __future__ import annotations

import contextlib
import math
import re
from pathlib import Path
from typing import Annotated

from pydantic import Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError

from storage.db import normalize_database_url

_REDIS_SCHEMES = ("redis://", "rediss://", "unix://")
_SHADOW_ENTRY = re.compile(r"^[A-Za-z0-9_.\-]+$")

DEFAULT_STATE_TTL_S = 30 * 86_400.0
"""How long a silent cluster's policy state is kept: 30 days (see `Settings.state_ttl_s`)."""


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ARBITER_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///var/arbiter.db",
        description="SQLAlchemy URL; a plain postgresql:// URL works. Default: a SQLite file.",
    )
    redis_url: str | None = Field(
        default=None, description="Redis for model and policy state; unset: in-process cache."
    )
    redis_prefix: str = Field(
        default="arbiter:",
        description="Prefix of every Redis key and channel Arbiter uses (one per deployment).",
    )
    state_ttl_s: float = Field(
        default=DEFAULT_STATE_TTL_S,
        ge=0,
        description=(
            "A cluster's policy state (and its learned feedback event ids) is dropped "
            "from the cache this many seconds after the cluster was last heard from (a "
            "stateful decision, or feedback that taught something): each write, and each "
            "stateful decision, restarts the clock. 0: never dropped. Default: 30 days."
        ),
    )
    admin_token: str | None = Field(
        default=None, description="Bearer token of the admin endpoints; unset disables them."
    )
    api_tokens: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Callers of /v1, `caller=token` pairs, comma-separated: each request then needs "
            "`Authorization: Bearer <token>`, and its caller is logged with what it sent. "
            "Empty (the default): /v1 is open and nothing names a caller."
        ),
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
    log_buffer_bytes: int = Field(
        default=256 << 20,
        ge=1,
        description=(
            "About how many bytes of log records (their snapshots and answers) are held in "
            "memory; past it, or past log_buffer records, records wait in spill files."
        ),
    )
    log_batch_size: int = Field(default=500, ge=1)
    log_flush_interval_s: float = Field(default=0.5, gt=0)
    retrain_max_active: int = Field(
        default=16,
        ge=1,
        description="Retrain jobs queued or running at once; more are refused with 429.",
    )
    retrain_heartbeat_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description=(
            "A running retrain job whose worker has sent no heartbeat for this long (one "
            "every 10 s) is failed, so that it can be sent again."
        ),
    )
    max_jobs: int = Field(
        default=100_000, ge=1, description="Most jobs in one snapshot; more are refused with 422."
    )
    max_nodes: int = Field(
        default=20_000, ge=1, description="Most nodes in one snapshot; more are refused with 422."
    )
    max_requests: int = Field(
        default=100_000,
        ge=1,
        description="Most pending inference requests in one snapshot; more are refused with 422.",
    )
    decision_cpu_budget_ms: float = Field(
        default=2000.0,
        ge=0,
        description=(
            "CPU time (of the deciding thread) one decision may spend in its policies; "
            "past it, the stage that ran over hands over to the profile's fallback (else "
            "its plainest heuristic) and the decision's `fallback` says so. 0: no budget."
        ),
    )
    log_stall_limit_s: float = Field(
        default=60.0,
        gt=0,
        description=(
            "Readiness degrades when log records have waited this long with none written "
            "or set aside (a writer that cannot make progress)."
        ),
    )
    migrate_on_start: bool = Field(
        default=True, description="Apply database migrations when the service starts."
    )
    models_check_interval_s: float = Field(
        default=5.0,
        gt=0,
        description=(
            "How often each replica asks the database which model versions are active, "
            "so it converges even when it missed an `arbiter:models` message."
        ),
    )
    retrain_queue: str = Field(
        default="arbiter-retrain",
        min_length=1,
        description="RQ queue that `arbiter worker` serves and POST /admin/retrain feeds.",
    )
    retrain_timeout_s: int = Field(
        default=6 * 3600, ge=60, description="A retraining running longer is stopped and failed."
    )
    shadow: Annotated[dict[str, str], NoDecode] = Field(
        default_factory=dict,
        description=(
            "Served profile -> shadow profile, optionally pinned to a model version: "
            "`drf=dl2,fifo=dl2@20261121-1`. Decisions under a served profile are also "
            "computed by its shadow, off the request path, and logged beside them."
        ),
    )
    shadow_backlog: int = Field(
        default=1000,
        ge=1,
        description="Shadow decisions waiting to be computed; past it they are skipped.",
    )
    decision_threads: int = Field(
        default=4,
        ge=1,
        le=256,
        description=(
            "Worker threads per process that run decisions, reclaims and feedback off the "
            "event loop, so that a slow decision never holds /healthz; more requests wait "
            "for a thread. Concurrency, not parallelism (the GIL): for throughput, run more "
            "processes (`arbiter serve --workers N`)."
        ),
    )

    inline_max_bytes: int = Field(
        default=65_536,
        ge=0,
        description=(
            "Decision requests of at most this many bytes under a stateless profile are "
            "decided on the event loop, without the hop to a decision thread (cheaper for "
            "small snapshots); larger ones and stateful profiles always run on a thread. "
            "0 sends every decision to a thread."
        ),
    )

    malloc_arenas: int = Field(
        default=2,
        ge=0,
        le=1024,
        description=(
            "Most glibc malloc arenas the process uses (set at start-up); fewer arenas "
            "hold less freed memory. 0 keeps glibc's default (eight per core)."
        ),
    )
    malloc_heap_block_mb: int = Field(
        default=32,
        ge=0,
        le=32,
        description=(
            "Blocks of up to this many MiB come from the C heap, and up to twice that may "
            "stay free in it between trims (glibc's mmap and trim thresholds, set at "
            "start-up): large decisions then reuse memory instead of mapping it afresh. "
            "0 keeps glibc's adaptive defaults. At most 32, the ceiling of glibc's own "
            "adaptive threshold on 64-bit systems."
        ),
    )
    malloc_trim_interval_s: float = Field(
        default=1.0,
        ge=0.0,
        description=(
            "After a large decision, give the C heap's free pages back to the system "
            "(malloc_trim) at most this often, from a background thread; 0 never does."
        ),
    )

    k8s_profile: str = Field(
        default="fifo-backfill",
        min_length=1,
        description="Profile the Kubernetes scheduler extender (/k8s/...) decides with.",
    )
    k8s_cluster_id: str = Field(
        default="kubernetes",
        min_length=1,
        max_length=255,
        description="Cluster id of /k8s/{verb}; /k8s/{cluster_id}/{verb} names its own.",
    )
    k8s_view_ttl_s: float = Field(
        default=300.0,
        gt=0,
        description="Nodes and waiting pods the extender has not seen for this long are dropped.",
    )
    k8s_bound_ttl_s: float = Field(
        default=86_400.0,
        gt=0,
        description=(
            "Pods the extender bound are taken to hold their GPUs this long, unless a "
            "`job_finished` feedback event for their job releases them first."
        ),
    )
    k8s_round_s: float = Field(
        default=5.0,
        gt=0,
        description="Longest the extender answers pods from one plan before asking again.",
    )
    k8s_kubeconfig: str | None = Field(
        default=None,
        description=(
            "Bind through the Kubernetes API: `in-cluster`, or a kubeconfig path. Unset: "
            "the bind verb records the binding only (the scheduler must then not delegate "
            "binding to Arbiter)."
        ),
    )

    volcano_profile: str = Field(
        default="fifo-backfill",
        min_length=1,
        description="Profile the Volcano extender plugin's verbs (/volcano/...) decide with.",
    )
    volcano_cluster_id: str = Field(
        default="volcano",
        min_length=1,
        max_length=255,
        description="Cluster id of /volcano/{verb}; /volcano/{cluster_id}/{verb} names its own.",
    )
    simulate_max_jobs: int = Field(
        default=2000,
        ge=1,
        description="Most trace rows in one POST /v1/simulate; more are refused with 422.",
    )
    simulate_max_profiles: int = Field(
        default=8, ge=1, description="Most profiles in one POST /v1/simulate (422 past it)."
    )
    simulate_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="A simulation running longer stops and is answered with 422.",
    )
    simulate_processes: int = Field(
        default=1,
        ge=1,
        le=64,
        description="Worker processes that run simulations (started on the first one).",
    )

    @field_validator("admin_token")
    @classmethod
    def _token_strong_enough(cls, value: str | None) -> str | None:
        if value is not None and value != "" and len(value) < 16:
            raise ValueError("ARBITER_ADMIN_TOKEN must be at least 16 characters")
        return value or None

    @field_validator("api_tokens", mode="before")
    @classmethod
    def _parse_api_tokens(cls, value: object) -> object:
        """`caller=token` pairs, comma-separated (or a mapping, in code), as caller → token."""
        if not isinstance(value, str):
            return value
        tokens: dict[str, str] = {}
        for entry in (part.strip() for part in value.split(",")):
            if not entry:
                continue
            caller, _, token = entry.partition("=")
            if not caller.strip() or not token.strip():
                raise ValueError(f"ARBITER_API_TOKENS: {entry!r} is not caller=token")
            tokens[caller.strip()] = token.strip()
        return tokens

    @field_validator("api_tokens")
    @classmethod
    def _api_tokens_usable(cls, tokens: dict[str, str]) -> dict[str, str]:
        for caller, token in tokens.items():
            if len(caller) > 64:
                raise ValueError(f"ARBITER_API_TOKENS: caller name {caller[:20]!r}… over 64")
            if len(token) < 16:
                raise ValueError(f"ARBITER_API_TOKENS: the token of {caller!r} is under 16")
        if len(set(tokens.values())) != len(tokens):
            raise ValueError("ARBITER_API_TOKENS: two callers share a token")
        return tokens

    @field_validator("shadow", mode="before")
    @classmethod
    def _parse_shadow(cls, value: object) -> object:
        """`served=shadow[@version]` pairs, comma-separated (or a mapping, in code)."""
        if not isinstance(value, str):
            return value
        pairs: dict[str, str] = {}
        for entry in filter(None, (part.strip() for part in value.split(","))):
            served, equals, target = (s.strip() for s in entry.partition("="))
            profile = target.partition("@")[0]
            if not equals or not served or not profile:
                raise ValueError(f"ARBITER_SHADOW entry {entry!r} is not `served=shadow[@version]`")
            if served in pairs:
                raise ValueError(f"ARBITER_SHADOW names profile {served!r} twice")
            pairs[served] = target
        return pairs

    @field_validator("shadow")
    @classmethod
    def _shadow_names(cls, value: dict[str, str]) -> dict[str, str]:
        for served, target in value.items():
            profile, at, version = target.partition("@")
            names = [served, profile] + ([version] if at else [])
            if not all(_SHADOW_ENTRY.match(name) for name in names):
                raise ValueError(
                    f"ARBITER_SHADOW entry {served}={target!r}: names are letters, digits, "
                    "'_', '-' and '.'"
                )
        return value

    @field_validator("state_ttl_s", mode="before")
    @classmethod
    def _state_ttl_is_seconds(cls, value: object) -> object:
        """A finite number of seconds, at least 0; said with the variable's name, since
        pydantic's own message would name only the field."""
        seconds = math.nan
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            with contextlib.suppress(ValueError):
                seconds = float(value)
        if not (math.isfinite(seconds) and seconds >= 0):
            raise ValueError(
                f"ARBITER_STATE_TTL_S must be a number of seconds, 0 or more (0: never "
                f"expire), not {value!r}"
            )
        return seconds

    @field_validator("database_url")
    @classmethod
    def _database_url_names_a_database(cls, value: str) -> str:
        """A URL SQLAlchemy can open, checked here so that a typo stops the start with the
        variable named, not a traceback from inside the app's start-up."""
        try:
            make_url(normalize_database_url(value)).get_dialect()
        except NoSuchModuleError:  # a kind of ArgumentError, so asked first
            raise ValueError(
                f"no database driver for {value.partition(':')[0]!r} (sqlite or postgresql)"
            ) from None
        except ArgumentError:
            raise ValueError(f"not a database URL: {value!r}") from None
        return value

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value and not value.startswith(_REDIS_SCHEMES):
            raise ValueError(f"must start with {', '.join(_REDIS_SCHEMES)}: {value!r}")
        return value or None


class SettingsError(ValueError):
    """Settings the environment gives that cannot be used; one line per variable."""


def load_settings() -> Settings:
    """:class:`Settings` from the environment, or a :class:`SettingsError` naming each
    `ARBITER_*` variable that is wrong and why (for the command line to print)."""
    try:
        return Settings()
    except ValidationError as error:
        lines = []
        for problem in error.errors(include_url=False):
            name = "ARBITER_" + "_".join(str(p) for p in problem["loc"][:1]).upper()
            message = str(problem["msg"]).removeprefix("Value error, ")
            lines.append(message if message.startswith(name) else f"{name}: {message}")
        raise SettingsError("; ".join(lines)) from None
