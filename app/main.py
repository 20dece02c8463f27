"""The app factory: `create_app(settings)` builds everything; nothing happens at import.

The lifespan owns the process-wide resources (database engine, decision log,
cache) and disposes of them on shutdown. Routers stay thin; services hold the
logic; storage owns the queries.
"""

from __future__ import annotations

import gc
import logging
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse
from fastapi.routing import APIRoute
from pydantic.json_schema import models_json_schema
from starlette.staticfiles import StaticFiles
from swagger_ui_bundle import swagger_ui_path

from app.adapters import k8s as k8s_wire
from app.adapters import volcano as volcano_wire
from app.deps import Services
from app.errors import ErrorOut, install_error_handlers
from app.limits import ApiTokenMiddleware, BodyLimitMiddleware, RequestGuardMiddleware
from app.memory import HeapTrimmer, keep_blocks_in_heap, limit_arenas
from app.metrics import Metrics
from app.routers import (
    admin,
    catalog,
    decisions,
    dispatch,
    feedback,
    health,
    k8s,
    reclaim,
    simulate,
    volcano,
)
from app.schemas import (
    DecisionRequest,
    DispatchRequestBody,
    FeedbackRequest,
    ReclaimRequestBody,
    SimulateRequest,
    StageDecisionRequest,
    link_snapshot_schema,
)
from app.services.catalog import CatalogService
from app.services.decisions import DecisionService, FeedbackService, SnapshotLimits
from app.services.dispatch import DispatchService
from app.services.health import HealthService
from app.services.k8s import ApiBinder, ExtenderOptions, KubeExtender
from app.services.models import ActiveModels, ModelService, ModelWatcher
from app.services.reclaim import ReclaimService
from app.services.retrain import LocalProcessQueue, RetrainQueue, RetrainService, RqRetrainQueue
from app.services.shadow import shadow_targets
from app.services.simulate import SimulateLimits, SimulateService
from app.services.volcano import VolcanoExtender
from app.settings import Settings
from app.threads import DecisionThreads
from policies.decision import Decision
from policies.dispatch.model import DispatchDecision
from policies.profiles import load_profiles
from policies.protocols import learned_model_key
from policies.reclaim_models import ReclaimDecision
from policies.registry import build_registry
from storage.cache import create_cache
from storage.db import create_engine_for, make_sessionmaker, upgrade_database
from storage.log import DecisionLog
from training.registry import trainers as all_trainers

log = logging.getLogger(__name__)

API_VERSION = "0.1.0"


def _operation_id(route: APIRoute) -> str:
    return route.name


def _prepare_sqlite_path(url: str) -> None:
    prefix = "sqlite:///"
    if url.startswith(prefix) and not url.startswith(prefix + ":memory:"):
        Path(url[len(prefix) :]).parent.mkdir(parents=True, exist_ok=True)


def _migrate_until_done(url: str, stop: threading.Event) -> None:
    """Apply migrations; if the database is away at start, keep trying in the background."""
    delay = 1.0
    while not stop.is_set():
        try:
            upgrade_database(url)
            return
        except Exception as error:
            log.warning("database migration failed (%s); retrying in %.0fs", error, delay)
            stop.wait(delay)
            delay = min(delay * 2, 30.0)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    registry = build_registry()
    profiles = load_profiles(registry, settings.profiles_file)
    shadows = shadow_targets(settings.shadow, profiles)  # a bad ARBITER_SHADOW fails here
    for setting, chosen in (
        ("ARBITER_K8S_PROFILE", settings.k8s_profile),
        ("ARBITER_VOLCANO_PROFILE", settings.volcano_profile),
    ):
        if chosen not in profiles:
            known = ", ".join(sorted(profiles))
            raise ValueError(f"{setting} {chosen!r} is not a profile: {known}")
    learned = {key for spec in registry.specs() if (key := learned_model_key(spec.cls))}
    trainers = all_trainers()
    if untrained := set(trainers.names()) - learned:
        raise ValueError(f"trainers for no registered learned policy: {sorted(untrained)}")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Before the log's and the decisions' threads exist, so that they share arenas.
        limit_arenas(settings.malloc_arenas)
        keep_blocks_in_heap(settings.malloc_heap_block_mb << 20)
        trimmer = HeapTrimmer(settings.malloc_trim_interval_s)
        trimmer.start()
        _prepare_sqlite_path(settings.database_url)
        stop = threading.Event()
        migrator: threading.Thread | None = None
        if settings.migrate_on_start:
            try:
                upgrade_database(settings.database_url)
            except Exception as error:
                log.warning("database unavailable at start (%s); decisions will be buffered", error)
                migrator = threading.Thread(
                    target=_migrate_until_done,
                    args=(settings.database_url, stop),
                    name="arbiter-migrate",
                    daemon=True,
                )
                migrator.start()
        engine = create_engine_for(settings.database_url)
        sessions = make_sessionmaker(engine)
        decision_log = DecisionLog(
            sessions,
            spill_dir=settings.spill_dir,
            max_buffer=settings.log_buffer,
            max_buffer_bytes=settings.log_buffer_bytes,
            batch_size=settings.log_batch_size,
            flush_interval_s=settings.log_flush_interval_s,
        )
        decision_log.start()
        cache = create_cache(settings.redis_url, prefix=settings.redis_prefix)
        metrics = Metrics()
        limits = SnapshotLimits(
            jobs=settings.max_jobs,
            nodes=settings.max_nodes,
            inference_requests=settings.max_requests,
        )
        metrics.watch_log(decision_log.stats)
        # Active model versions before the pipelines are built: from the cache, else the
        # database; the watcher then keeps them current (messages and periodic checks).
        active_models = ActiveModels(sessions, cache, learned)
        active_models.load()
        decision_service = DecisionService(
            registry,
            profiles,
            decision_log,
            metrics,
            cache,
            active_models,
            shadow=shadows,
            load_version=lambda policy, version: active_models.version(policy, version)[0],
            shadow_backlog=settings.shadow_backlog,
            limits=limits,
            shadow_retry_s=settings.models_check_interval_s,
            cpu_budget_s=settings.decision_cpu_budget_ms / 1000.0 or None,
            inline_max_bytes=settings.inline_max_bytes,
            trimmer=trimmer,
            state_ttl_s=settings.state_ttl_s or None,  # 0: never expire
        )
        dispatch_service = DispatchService(
            registry, profiles, decision_log, metrics, limits=limits, models=active_models
        )

        def models_changed(changed: set[str]) -> None:
            decision_service.rebuild(changed)
            dispatch_service.rebuild(changed)

        watcher = ModelWatcher(
            active_models, cache, models_changed, settings.models_check_interval_s
        )
        watcher.start()
        queue: RetrainQueue = (
            RqRetrainQueue(settings.redis_url, settings.retrain_queue, settings.retrain_timeout_s)
            if settings.redis_url
            else LocalProcessQueue(settings, sessions, on_finished=watcher.wake)
        )
        simulator = SimulateService(
            profiles,
            SimulateLimits(
                max_jobs=settings.simulate_max_jobs,
                max_profiles=settings.simulate_max_profiles,
                max_nodes=settings.max_nodes,
                timeout_s=settings.simulate_timeout_s,
                processes=settings.simulate_processes,
            ),
        )
        reclaim_service = ReclaimService(registry, profiles, decision_log, metrics, limits)
        extender = KubeExtender(
            decision_service,
            reclaim_service,
            cache,
            ExtenderOptions(
                profile=settings.k8s_profile,
                view_ttl_s=settings.k8s_view_ttl_s,
                bound_ttl_s=settings.k8s_bound_ttl_s,
                round_s=settings.k8s_round_s,
            ),
            binder=ApiBinder(settings.k8s_kubeconfig) if settings.k8s_kubeconfig else None,
        )
        app.state.services = Services(
            settings=settings,
            metrics=metrics,
            decisions=decision_service,
            reclaim=reclaim_service,
            feedback=FeedbackService(
                decision_log, metrics, decision_service.learn, [extender.release_job]
            ),
            catalog=CatalogService(
                registry, profiles, active_models, decision_service.learns_from_feedback
            ),
            health=HealthService(
                engine,
                cache,
                decision_log.stats,
                len(profiles),
                active_models,
                log_stall_limit_s=settings.log_stall_limit_s,
            ),
            models=ModelService(sessions, cache),
            retrain=RetrainService(
                sessions,
                queue,
                settings.retrain_max_active,
                settings.retrain_heartbeat_timeout_s,
                trainers,
            ),
            threads=DecisionThreads(settings.decision_threads),
            dispatch=dispatch_service,
            k8s=extender,
            simulate=simulator,
            volcano=VolcanoExtender(
                decision_service, reclaim_service, cache, settings.volcano_profile
            ),
        )
        app.state.decision_log = decision_log
        app.state.model_watcher = watcher
        # The objects built so far (registry, pipelines, models, torch and every imported
        # module: about 250,000) live as long as the process. Frozen, they leave the
        # collector's generations, so the full collections that a large decision's many
        # objects trigger no longer walk them all: up to about 170 ms each, holding the GIL,
        # without the freeze (docs/benchmarks.md, "Health while decisions run").
        gc.freeze()
        try:
            yield
        finally:
            gc.unfreeze()  # a stopped app's objects may be collected again (tests, reloads)
            stop.set()
            simulator.close()
            queue.close()
            watcher.stop()
            decision_service.stop()  # queued shadow decisions reach the log before it stops
            decision_log.stop()
            cache.close()
            engine.dispose()
            trimmer.stop()
            if migrator is not None:
                migrator.join(timeout=1.0)

    app = FastAPI(
        title="Arbiter",
        version=API_VERSION,
        summary="Scheduling decisions for GPU clusters that train and serve deep-learning models.",
        lifespan=lifespan,
        generate_unique_id_function=_operation_id,
        docs_url=None,  # served below from the package, not from a CDN
        redoc_url=None,
    )
    _serve_docs(app)
    # Innermost, inside every check below: the decision endpoints, served ahead of the
    # routing (whose routes for them only document them).
    app.add_middleware(decisions.DecisionEndpoints)
    if settings.api_tokens:
        app.add_middleware(ApiTokenMiddleware, tokens=settings.api_tokens)
    app.add_middleware(RequestGuardMiddleware)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    install_error_handlers(app)
    for router in (
        decisions.router,
        reclaim.router,
        dispatch.router,
        feedback.router,
        catalog.router,
        health.router,
        admin.router,
        k8s.router,
        simulate.router,
        volcano.router,
    ):
        app.include_router(router)

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        spec = get_openapi(
            title=app.title,
            version=app.version,
            summary=app.summary,
            routes=app.routes,
        )
        # Raw-body routes declare their request schemas by reference; add those models:
        # the core's Structs through msgspec's generator, the rest through pydantic's.
        _, core_defs = msgspec.json.schema_components(
            (
                DecisionRequest,
                StageDecisionRequest,
                ReclaimRequestBody,
                Decision,
                ReclaimDecision,
                DispatchRequestBody,
                DispatchDecision,
            ),
            ref_template="#/components/schemas/{name}",
        )
        _, defs = models_json_schema(
            [
                (FeedbackRequest, "validation"),
                (SimulateRequest, "validation"),
                (ErrorOut, "serialization"),
            ],
            ref_template="#/components/schemas/{model}",
        )
        schemas = spec.setdefault("components", {}).setdefault("schemas", {})
        _, wire_defs = msgspec.json.schema_components(
            (
                k8s_wire.ExtenderArgs,
                k8s_wire.ExtenderFilterResult,
                k8s_wire.HostPriority,
                k8s_wire.ExtenderBindingArgs,
                k8s_wire.ExtenderBindingResult,
                k8s_wire.ExtenderPreemptionArgs,
                k8s_wire.ExtenderPreemptionResult,
                k8s_wire.NodeList,
                volcano_wire.OnSessionOpenRequest,
                volcano_wire.PredicateRequest,
                volcano_wire.PredicateResponse,
                volcano_wire.PrioritizeRequest,
                volcano_wire.PrioritizeResponse,
                volcano_wire.EvictionRequest,
                volcano_wire.EvictionResponse,
                volcano_wire.JobRequest,
                volcano_wire.EnqueueResponse,
                volcano_wire.ReadyResponse,
                volcano_wire.QueueOverusedRequest,
                volcano_wire.QueueOverusedResponse,
                volcano_wire.Empty,
            ),
            ref_template="#/components/schemas/{name}",
        )
        for name, schema in {**core_defs, **wire_defs, **defs.get("$defs", {})}.items():
            schemas.setdefault(name, schema)
        link_snapshot_schema(schemas)
        # msgspec writes a tagged union's tag field bare; say what it is for.
        for name in ("SigmoidUtility", "StepUtility"):
            kind = schemas[name]["properties"]["kind"]
            kind.setdefault("description", "Which utility form this is (the union's tag).")
        # FastAPI documents its own validation-error shape for every route with parameters;
        # this service answers every error, validation included, in one shape (ErrorOut).
        for operations in spec.get("paths", {}).values():
            for operation in operations.values():
                invalid = operation.get("responses", {}).get("422")
                if invalid is not None and "HTTPValidationError" in str(invalid):
                    invalid["description"] = (
                        "The request does not validate; each problem names its JSON path."
                    )
                    invalid["content"] = {
                        "application/json": {"schema": {"$ref": "#/components/schemas/ErrorOut"}}
                    }
        for unused in ("HTTPValidationError", "ValidationError"):
            schemas.pop(unused, None)
        # Admin endpoints take `Authorization: Bearer <ARBITER_ADMIN_TOKEN>`.
        spec["components"]["securitySchemes"] = {
            "adminToken": {
                "type": "http",
                "scheme": "bearer",
                "description": "The service's ARBITER_ADMIN_TOKEN; admin is disabled without one.",
            }
        }
        spec["components"]["securitySchemes"]["apiToken"] = {
            "type": "http",
            "scheme": "bearer",
            "description": (
                "A caller's token from ARBITER_API_TOKENS; /v1 asks for one only when "
                "tokens are configured."
            ),
        }
        for path, operations in spec.get("paths", {}).items():
            for operation in operations.values():
                if path.startswith("/admin/"):
                    operation["security"] = [{"adminToken": []}]
                elif path.startswith("/v1/"):
                    operation["security"] = [{}, {"apiToken": []}]  # optional
        app.openapi_schema = spec
        return spec

    app.openapi = openapi  # type: ignore[method-assign]
    return app


DOCS_ASSETS = "/docs/assets"


def _serve_docs(app: FastAPI) -> None:
    """Swagger UI at /docs with its scripts and styles from the installed package
    (swagger-ui-bundle-v2), so that it renders where no CDN can be reached."""
    app.mount(DOCS_ASSETS, StaticFiles(directory=str(swagger_ui_path)), name="docs-assets")

    @app.get("/docs", include_in_schema=False)
    async def docs() -> HTMLResponse:
        return get_swagger_ui_html(
            openapi_url="/openapi.json",
            title=f"{app.title} API",
            swagger_js_url=f"{DOCS_ASSETS}/swagger-ui-bundle.js",
            swagger_css_url=f"{DOCS_ASSETS}/swagger-ui.css",
            swagger_favicon_url=f"{DOCS_ASSETS}/favicon-32x32.png",
        )


def app_factory() -> FastAPI:
    """Entry point for `uvicorn --factory`: settings from the environment."""
    return create_app(Settings())
