"""The `arbiter` console script (DESIGN §7).

Every verb imports what it needs when it runs, never when the parser is built:
`arbiter --help` lists the verbs without importing the engine, torch or the
simulator. The verbs whose options live with their code (`simulate`, `train`,
`worker`) declare those options when the verb is parsed (:class:`_VerbParser`),
so that importing their modules is part of running that verb.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any

from simulator import options

Declare = Callable[[argparse.ArgumentParser], None]
"""Adds a verb's options to its parser and sets its `handler`."""


class _VerbParser(argparse.ArgumentParser):
    """A verb's parser whose options are declared on first use, not when it is built.

    The top-level help shows each verb by its help line alone, so a verb whose options
    come from a heavy module (the simulator's pulls in the engine and numpy) costs nothing
    until it is the verb being parsed, or asked for its help.
    """

    def __init__(self, *args: Any, declare: Declare | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._declare = declare

    def _declared(self) -> None:
        declare, self._declare = self._declare, None
        if declare is not None:
            declare(self)

    def parse_known_args(  # type: ignore[override]  # one signature covers the overloads
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._declared()
        return super().parse_known_args(args, namespace)

    def format_help(self) -> str:
        self._declared()
        return super().format_help()


def _serve(args: argparse.Namespace) -> int:
    from app.serving import ServeOptions, serve
    from app.settings import load_settings

    load_settings()  # each worker reads them again; a mistake stops the start here, named
    return serve(
        ServeOptions(host=args.host, port=args.port, workers=args.workers, log_level=args.log_level)
    )


def _db_upgrade(args: argparse.Namespace) -> int:
    from app.settings import load_settings
    from storage.db import upgrade_database, wait_for_database

    settings = load_settings()
    wait_for_database(settings.database_url, timeout_s=args.wait_s)
    upgrade_database(settings.database_url)
    print("database is at the latest revision", file=sys.stderr)
    return 0


def _openapi(args: argparse.Namespace) -> int:
    from app.main import create_app
    from app.settings import load_settings

    spec = create_app(load_settings()).openapi()
    print(json.dumps(spec, indent=2 if args.indent else None, sort_keys=False))
    return 0


def _simulate_options(parser: argparse.ArgumentParser) -> None:
    from simulator.cli import add_simulate_arguments, run_simulate

    add_simulate_arguments(parser)
    parser.set_defaults(handler=run_simulate)


def _sweep_options(parser: argparse.ArgumentParser) -> None:
    from simulator.sweep_cli import add_sweep_arguments, run_sweep

    add_sweep_arguments(parser)
    parser.set_defaults(handler=run_sweep)


def _dispatch_simulate_options(parser: argparse.ArgumentParser) -> None:
    from simulator.accelerator.cli import add_dispatch_simulate_arguments, run_dispatch_simulate

    add_dispatch_simulate_arguments(parser)
    parser.set_defaults(handler=run_dispatch_simulate)


def _train_options(parser: argparse.ArgumentParser) -> None:
    from app.retrain_cli import add_train_arguments, run_train

    add_train_arguments(parser)
    parser.set_defaults(handler=run_train)


def _worker_options(parser: argparse.ArgumentParser) -> None:
    from app.retrain_cli import add_worker_arguments, run_worker

    add_worker_arguments(parser)
    parser.set_defaults(handler=run_worker)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="arbiter", description="Scheduling decisions for GPU clusters."
    )
    commands = parser.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=_VerbParser
    )

    serve = commands.add_parser("serve", help="Run the HTTP service.")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument(
        "--port",
        type=options.whole_number(0, 65535),
        default=8000,
        help="TCP port, 0 to 65535 (0: any free one).",
    )
    serve.add_argument(
        "--workers",
        type=options.at_least_one,
        default=1,
        help=(
            "Worker processes, each with its own socket on the port (SO_REUSEPORT, so the "
            "kernel spreads connections over them); each runs decisions on "
            "ARBITER_DECISION_THREADS threads."
        ),
    )
    serve.add_argument("--log-level", default="info")
    serve.set_defaults(handler=_serve)

    db = commands.add_parser("db", help="Database maintenance.")
    db_commands = db.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    upgrade = db_commands.add_parser("upgrade", help="Apply migrations up to the latest.")
    upgrade.add_argument("--wait-s", type=float, default=30.0, help="Wait for the database.")
    upgrade.set_defaults(handler=_db_upgrade)

    commands.add_parser(
        "simulate",
        help="Replay a trace under one or more profiles.",
        declare=_simulate_options,
    )
    commands.add_parser(
        "sweep",
        help="A grid of simulations (cases, profiles, seeds, loads) on processes or Ray.",
        declare=_sweep_options,
    )
    commands.add_parser(
        "dispatch-simulate",
        help="Run inference dispatch scenarios on the accelerator simulator under profiles.",
        declare=_dispatch_simulate_options,
    )
    commands.add_parser(
        "train",
        help="Retrain a learned policy from the decision log, in the foreground.",
        declare=_train_options,
    )
    commands.add_parser(
        "worker", help="Run retraining jobs from the Redis queue.", declare=_worker_options
    )

    openapi = commands.add_parser("openapi", help="Print the OpenAPI spec as JSON.")
    openapi.add_argument("--indent", action="store_true")
    openapi.set_defaults(handler=_openapi)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        result: int = args.handler(args)
    except ValueError as error:
        # Only a verb that read the settings can raise their error, and it has imported
        # them: looked up here, `arbiter simulate` does not pay for importing them.
        from app.settings import SettingsError

        if not isinstance(error, SettingsError):
            raise
        print(f"arbiter {args.command}: error: {error}", file=sys.stderr)
        return 2
    return result


if __name__ == "__main__":
    raise SystemExit(main())
