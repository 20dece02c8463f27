"""`arbiter dispatch-simulate`: dispatch scenarios under profiles, in process or over HTTP.

    arbiter dispatch-simulate --scenario heavy-mixed --profile relmas --profile edf \
        [--seeds 3] [--seed 0] [--json] [--out DIR] [--via-http URL [--report-outcomes]]

Prints a Markdown table (one row per scenario and profile, means over the seeds) or,
with `--json`, exactly one JSON object `{"results": [{"scenario", "profile", <metrics>},
…]}` (per seed under `"runs"`); `--out DIR` also writes `report.md`, `results.json` and
three plots: SLA satisfaction over load, per tenant, and each sub-accelerator's
utilisation. `--via-http URL` sends every snapshot to a running
service (`POST /v1/dispatch`) instead of calling the policies in process: the same
policy code either way, and the same results.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from simulator import options
from simulator.accelerator.costs import load_costs
from simulator.accelerator.dispatchers import Dispatcher, HttpDispatcher, InProcessDispatcher
from simulator.accelerator.report import mean_over_seeds, metrics, table, write_plots
from simulator.accelerator.system import run_episode
from simulator.accelerator.workload import arrivals, scenarios
from simulator.deciders import UnknownProfileError


def add_dispatch_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    names = sorted(scenarios())
    parser.add_argument(
        "--scenario",
        action="append",
        choices=names,
        help="Scenario (repeatable; default: all): " + ", ".join(names),
    )
    parser.add_argument(
        "--profile",
        action="append",
        required=True,
        help="Profile whose dispatch policy answers (repeatable).",
    )
    parser.add_argument("--seed", type=options.seed, default=0, help="First seed.")
    parser.add_argument(
        "--seeds",
        type=options.at_least_one,
        default=1,
        help="Seeds per scenario (seed, seed+1, …).",
    )
    parser.add_argument("--json", action="store_true", help="One JSON object on stdout.")
    parser.add_argument("--out", type=Path, help="Write report.md, results.json, plots.")
    parser.add_argument("--via-http", metavar="URL", help="Ask a running service instead.")
    parser.add_argument(
        "--report-outcomes",
        action="store_true",
        help=(
            "With --via-http: after each episode, POST its requests' outcomes to /v1/feedback "
            "(`inference` events, latency and SLA met), as a caller would; each episode is "
            "its own system, SCENARIO/PROFILE/seedN. RELMAS's retraining learns from them."
        ),
    )


def simulate(
    scenario_names: list[str],
    profiles: list[str],
    seeds: list[int],
    *,
    via_http: str | None = None,
    dispatcher_for: Callable[[str], Dispatcher] | None = None,
    max_requests: int | None = None,
    report_outcomes: bool = False,
) -> list[dict[str, Any]]:
    """Mean metrics per (scenario, profile) over `seeds`, each with its per-seed `runs`.

    `dispatcher_for(profile)` overrides who answers (tests pass a service's client);
    `max_requests` keeps only each episode's first arrivals (tests); `report_outcomes`
    posts each episode's outcomes to the service's `/v1/feedback` (over HTTP only)."""
    table_ = scenarios()
    costs = load_costs()
    out = []
    for name in scenario_names:
        scenario = table_[name]
        for profile in profiles:
            if dispatcher_for is not None:
                dispatcher = dispatcher_for(profile)
            elif via_http is not None:
                dispatcher = HttpDispatcher(via_http, profile)
            else:
                dispatcher = InProcessDispatcher(profile)
            runs = []
            for seed in seeds:
                started = time.perf_counter()
                work = arrivals(scenario, costs, seed)[:max_requests]
                system_id = f"{name}/{profile}/seed{seed}" if report_outcomes else None
                result = run_episode(scenario, costs, work, dispatcher, system_id=system_id)
                if system_id is not None:
                    if not isinstance(dispatcher, HttpDispatcher):
                        raise ValueError("outcomes are reported to a service: use --via-http")
                    dispatcher.report(result, system_id)
                row = {"scenario": name, "profile": profile, "seed": seed, **metrics(result)}
                row["sim_wall_s"] = time.perf_counter() - started

                runs.append(row)
            if isinstance(dispatcher, HttpDispatcher) and dispatcher_for is None:
                dispatcher.close()
            summary = mean_over_seeds(runs)
            summary.pop("sim_wall_s", None)
            summary.pop("seed", None)
            summary["runs"] = runs
            out.append(summary)
    return out


def run_dispatch_simulate(args: argparse.Namespace) -> int:
    names = args.scenario or sorted(scenarios())
    seeds = list(range(args.seed, args.seed + args.seeds))
    if args.report_outcomes and args.via_http is None:
        print("--report-outcomes needs --via-http URL (the service to report to)", file=sys.stderr)
        return 2
    if seeds[-1] > options.MAX_SEED:
        print(
            f"arbiter dispatch-simulate: error: --seed {args.seed} with --seeds {args.seeds} "
            f"runs past the largest seed, {options.MAX_SEED}",
            file=sys.stderr,
        )
        return 2
    try:
        results = simulate(
            names, args.profile, seeds, via_http=args.via_http, report_outcomes=args.report_outcomes
        )
    except UnknownProfileError as error:
        print(f"arbiter dispatch-simulate: error: {error}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({"results": results}))
    else:
        print(table(results))
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "results.json").write_text(json.dumps({"results": results}, indent=1))
        loads = {n: s.load for n, s in scenarios().items()}
        plots = write_plots(results, loads, args.out)
        figures = "".join(f"![{caption}]({path.name})\n\n" for caption, path in plots.items())
        (args.out / "report.md").write_text(
            f"# Dispatch simulation\n\nSeeds {seeds}; decisions from "
            f"{args.via_http or 'the policies in process'}.\n\n{table(results)}\n\n" + figures
        )
        print(f"report in {args.out}", file=sys.stderr)
    return 0
