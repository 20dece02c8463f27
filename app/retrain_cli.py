"""`arbiter train NAME` and `arbiter worker`: retraining from the command line.

`arbiter train NAME …` runs the same job as `POST /admin/retrain` (same request
fields, same validation, same `retrain_jobs` row, same activation rule) for any
policy of the trainer registry (:mod:`training.registry`), in the foreground,
with one progress bar per stage on stderr; the job's outcome is printed as JSON on
stdout. `arbiter worker` serves the RQ queue the service feeds (:mod:`app.worker`).
Both read `ARBITER_*` like the service.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections.abc import Callable
from datetime import datetime
from typing import Never

# What a verb needs is imported when it runs (or, for `train`, when its options are
# declared): `arbiter worker --help` imports neither the service nor the trainer.


def _budget_options() -> dict[str, tuple[type, str]]:
    """Every budget field of every trainer, as an option: name → (type, help)."""
    from training.registry import trainers

    options: dict[str, tuple[type, str]] = {}
    for trainer in trainers():
        for name, info in trainer.Budget.model_fields.items():
            kind: type = int if info.annotation is int else float
            owners = options.get(name, (kind, ""))[1]
            where = f"{owners}, {trainer.name}" if owners else trainer.name
            options[name] = (kind, where)
    return options


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    from simulator.sweep_cli import add_runner_arguments
    from training.registry import trainers

    parser.add_argument("policy", choices=trainers().names(), help="learned policy to retrain")
    parser.add_argument("--since", type=datetime.fromisoformat, help="window start (ISO 8601)")
    parser.add_argument("--until", type=datetime.fromisoformat, help="window end (ISO 8601)")
    parser.add_argument("--profile", help="imitate only decisions of this profile")
    budget = parser.add_argument_group(
        "budget", "the policy's budget fields (default: its shipped run); `budget.*` of the API"
    )
    for name, (kind, owners) in _budget_options().items():
        budget.add_argument(
            "--" + name.replace("_", "-"), type=kind, dest=name, help=f"budget of {owners}"
        )
    parser.add_argument("--activate", choices=("if_better", "always", "never"), default="if_better")
    parser.add_argument("--start", choices=("incumbent", "scratch"), default="incumbent")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-progress", action="store_true", help="No progress bars.")
    add_runner_arguments(
        parser,
        default_processes=1,
        what="simulated episodes of DL2's RL and verdict (dl2, dl2-srtf)",
    )


def add_worker_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--burst", action="store_true", help="Run what is queued, then exit (tests, cron)."
    )
    parser.add_argument("--queue", help="Queue name (default: ARBITER_RETRAIN_QUEUE).")


def _stage_bars(enabled: bool) -> tuple[Callable[[str, float], None], Callable[[], None]]:
    """A progress callback drawing one bar per stage (as `arbiter simulate` draws one per
    profile), and a function closing the last one."""
    from tqdm import tqdm

    bars: dict[str, tqdm[Never]] = {}

    def report(stage: str, fraction: float) -> None:
        if not enabled:
            return
        bar = bars.get(stage)
        if bar is None:
            for previous in bars.values():
                previous.close()
            bar = tqdm(total=100, desc=stage, unit="%", file=sys.stderr, leave=True)
            bars[stage] = bar
        bar.update(max(0, round(fraction * 100) - bar.n))

    def close() -> None:
        for bar in bars.values():
            bar.close()

    return report, close


def run_train(args: argparse.Namespace) -> int:
    """`arbiter train`: 0 when the job succeeded, 1 when it failed, 2 for bad input."""
    from pydantic import ValidationError
    from sqlalchemy.exc import SQLAlchemyError

    from app.errors import ApiError, UnavailableError
    from app.schemas import RetrainRequest
    from app.services.retrain import RetrainService, run_retrain_job
    from app.settings import load_settings
    from simulator.sweep_cli import runner_from_args
    from storage.cache import create_cache
    from storage.db import create_engine_for, make_sessionmaker, schema_is_current
    from training.dl2.trainer import Dl2Trainer
    from training.registry import Trainers, trainers

    known = trainers()
    plays = [t.name for t in known if isinstance(t, Dl2Trainer)]
    if args.policy not in plays and (args.ray is not None or args.processes != 1):
        print(
            f"arbiter train: error: --processes and --ray apply to {' and '.join(plays)} only",
            file=sys.stderr,
        )
        return 2
    budget = {
        name: getattr(args, name)
        for name in _budget_options()
        if getattr(args, name, None) is not None
    }
    try:
        request = RetrainRequest.model_validate(
            {
                "policy": args.policy,
                "window": {"since": args.since, "until": args.until},
                "profile": args.profile,
                "budget": budget,
                "activate": args.activate,
                "start": args.start,
                "seed": args.seed,
            }
        )
    except ValidationError as error:
        for problem in error.errors(include_url=False):
            where = ".".join(str(p) for p in problem["loc"])
            print(f"arbiter train: error: {where}: {problem['msg']}", file=sys.stderr)
        return 2
    settings = load_settings()
    engine = create_engine_for(settings.database_url)
    cache = create_cache(settings.redis_url, prefix=settings.redis_prefix)
    report, close = _stage_bars(not args.no_progress and sys.stderr.isatty())
    try:
        sessions = make_sessionmaker(engine)
        try:
            job = RetrainService(sessions, queue=None).create(request)
        except ApiError as error:
            detail = error.detail
            if isinstance(error, UnavailableError):
                # Reached, but without the tables (a fresh file): not a matter of retrying.
                with contextlib.suppress(SQLAlchemyError):
                    if not schema_is_current(engine, settings.database_url):
                        detail = (
                            "the database ARBITER_DATABASE_URL names has no Arbiter schema, "
                            "or an older one: run `arbiter db upgrade` (the service does it "
                            "when it starts)"
                        )
            print(f"arbiter train: error: {detail}", file=sys.stderr)
            return 2
        print(f"retrain job {job.id}", file=sys.stderr)
        # Where dl2 plays its episodes is the caller's machine, not the job's: not a request field.
        runner = runner_from_args(args)
        registry = Trainers(type(t)(runner) if isinstance(t, Dl2Trainer) else t for t in known)
        out = run_retrain_job(sessions, cache, job.id, trainers=registry, on_progress=report)
    finally:
        close()
        cache.close()
        engine.dispose()
    if out is None:
        return 1
    print(
        json.dumps(
            out.model_dump(mode="json", include={"id", "status", "version", "metrics", "error"})
        )
    )
    return 0 if out.status == "succeeded" else 1


def run_worker(args: argparse.Namespace) -> int:
    from app.settings import load_settings
    from app.worker import serve

    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return serve(load_settings(), burst=args.burst, queue=args.queue)
    except ValueError as error:
        print(f"arbiter worker: error: {error}", file=sys.stderr)
        return 2
