"""`arbiter sweep`: a grid of simulations on local processes or a Ray cluster, one table.

    arbiter sweep --case TRACE CLUSTER [--case TRACE CLUSTER ...] --profile NAME [...]
                  [--seeds 0 1 2] [--load 1 3] [--vary NAME=V1,V2 ...] [--max-jobs N]
                  [--perf-model measured|ideal] [--processes N | --ray ADDRESS]
                  [--json] [--out FILE]

Every combination of case, load, workload variant, profile and seed is one
simulation (:mod:`simulator.sweep`). The table shows each setting's metrics as mean
± standard deviation over the seeds, with `jct_vs_bound`, mean JCT over the
no-queueing bound. `--json` prints every row instead (one JSON object,
`{"results": [...], "summary": [...]}`); `--out FILE` also writes the Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from typing import TYPE_CHECKING, Any

from simulator import options
from simulator.workload import WorkloadError

if TYPE_CHECKING:
    from simulator.sweep import Runner


def _variant(text: str) -> tuple[str, list[Any]]:
    name, sep, values = text.partition("=")
    if not sep or not name or not values:
        raise argparse.ArgumentTypeError(f"{text!r} is not NAME=V1,V2,…")
    parsed: list[Any] = []
    for value in values.split(","):
        try:
            parsed.append(json.loads(value))
        except json.JSONDecodeError:
            parsed.append(value)  # a bare word: a string option (model_mix, utility)
    return name.replace("-", "_"), parsed


def add_runner_arguments(
    parser: argparse.ArgumentParser, *, default_processes: int, what: str
) -> None:
    """`--processes N | --ray ADDRESS`: where independent tasks (`what`) run; read back
    by :func:`runner_from_args`. `arbiter sweep` and DL2's trainers share them."""
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--processes",
        type=options.at_least_one,
        default=default_processes,
        help=f"Run the {what} on this many local processes (1: in this process; "
        f"default {default_processes}).",
    )
    where.add_argument(
        "--ray",
        metavar="ADDRESS",
        default=None,
        help=f"Run the {what} as tasks on this Ray cluster ('local': start one here).",
    )


def runner_from_args(args: argparse.Namespace, tasks: int | None = None) -> Runner:
    """The runner `--processes`/`--ray` ask for; no more processes than `tasks`, if given."""
    from simulator.sweep import InProcess, ProcessPool, RayCluster  # noqa: PLC0415

    if args.ray is not None:
        return RayCluster(args.ray)
    processes = int(args.processes) if tasks is None else min(int(args.processes), tasks)
    if processes > 1:
        return ProcessPool(processes)
    return InProcess()


def add_sweep_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--case",
        nargs=2,
        action="append",
        required=True,
        metavar=("TRACE", "CLUSTER"),
        help="A trace CSV and the cluster spec to replay it on; repeat for several.",
    )
    parser.add_argument("--profile", action="append", required=True, metavar="NAME")
    parser.add_argument("--seeds", type=options.seed, nargs="+", default=[0, 1, 2], metavar="N")
    parser.add_argument(
        "--load",
        type=float,
        nargs="+",
        default=[1.0],
        metavar="X",
        help="Arrival compression factors: gaps between arrivals divided by X (1: as recorded).",
    )
    parser.add_argument(
        "--vary",
        type=_variant,
        action="append",
        default=[],
        metavar="NAME=V1,V2",
        help="A workload option's values, as an axis (elastic_fraction=0,0.5; model_mix=gavel).",
    )
    parser.add_argument(
        "--max-jobs", type=options.count, default=None, help="Only the first N jobs."
    )
    parser.add_argument("--perf-model", choices=("measured", "ideal"), default="measured")
    add_runner_arguments(parser, default_processes=os.cpu_count() or 1, what="points")
    parser.add_argument("--json", action="store_true", help="Print every row as JSON.")
    parser.add_argument("--out", default=None, metavar="FILE", help="Also write the table here.")


def run_sweep(args: argparse.Namespace) -> int:
    """Run `arbiter sweep`; returns the exit status (0 ok, 2 bad input)."""
    from itertools import product  # noqa: PLC0415

    from simulator.sweep import (  # noqa: PLC0415
        Grid,
        SweepError,
        render,
        run_point,
        summarise,
    )

    names = [name for name, _ in args.vary]
    workloads = [
        dict(zip(names, values, strict=True)) for values in product(*(v for _, v in args.vary))
    ]
    grid = Grid(
        cases=[(trace, cluster) for trace, cluster in args.case],
        profiles=args.profile,
        seeds=args.seeds,
        loads=args.load,
        workloads=workloads or [{}],
        max_jobs=args.max_jobs,
        perf_mode=args.perf_model,
    )
    try:
        points = grid.points()
    except (SweepError, WorkloadError, TypeError) as error:
        print(f"arbiter sweep: error: {error}", file=sys.stderr)
        return 2
    rows = runner_from_args(args, len(points)).map(run_point, points)
    summary = summarise(rows)
    table = render(summary)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as out:
            out.write(table + "\n")
    if args.json:
        payload = {"results": rows, "summary": [asdict(s) for s in summary]}
        sys.stdout.write(json.dumps(payload) + "\n")
    else:
        print(table)
    return 0
