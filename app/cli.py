"""The `arbiter` console script (DESIGN §7)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    uvicorn.run(
        "app.main:app_factory",
        factory=True,
        host=args.host,
        port=args.port,
        workers=args.workers,
        log_level=args.log_level,
        access_log=False,
    )
    return 0


def _db_upgrade(args: argparse.Namespace) -> int:
    from app.settings import Settings
    from storage.db import upgrade_database, wait_for_database

    settings = Settings()
    wait_for_database(settings.database_url, timeout_s=args.wait_s)
    upgrade_database(settings.database_url)
    print("database is at the latest revision", file=sys.stderr)
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from app.main import create_app
    from app.settings import Settings

    spec = create_app(Settings()).openapi()
    print(json.dumps(spec, indent=2 if args.indent else None, sort_keys=False))
    return 0


def build_parser() -> argparse.ArgumentParser:
    from app.retrain_cli import add_train_arguments, add_worker_arguments, run_train, run_worker
    from simulator.cli import add_simulate_arguments, run_simulate

    parser = argparse.ArgumentParser(
        prog="arbiter", description="Scheduling decisions for GPU clusters."
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="Run the HTTP service.")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--workers", type=int, default=1)
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(handler=_serve)

    db = commands.add_parser("db", help="Database maintenance.")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade = db_commands.add_parser("upgrade", help="Apply migrations up to the latest.")
    upgrade.add_argument("--wait-s", type=float, default=30.0, help="Wait for the database.")
    upgrade.set_defaults(handler=_db_upgrade)

    simulate = commands.add_parser("simulate", help="Replay a trace under one or more profiles.")
    add_simulate_arguments(simulate)
    simulate.set_defaults(handler=run_simulate)

    train = commands.add_parser(
        "train", help="Retrain a learned policy from the decision log, in the foreground."
    )
    add_train_arguments(train)
    train.set_defaults(handler=run_train)

    worker = commands.add_parser("worker", help="Run retraining jobs from the Redis queue.")
    add_worker_arguments(worker)
    worker.set_defaults(handler=run_worker)

    openapi = commands.add_parser("openapi", help="Print the OpenAPI spec as JSON.")
    openapi.add_argument("--indent", action="store_true")
    openapi.set_defaults(handler=_openapi)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    result: int = args.handler(args)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
