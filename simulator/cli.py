"""`arbiter simulate` (DESIGN §7): replay a trace on a cluster under one or more profiles.

    arbiter simulate --trace CSV --cluster JSON --profile NAME [--profile NAME ...]
                     [--max-jobs N] [--seed N] [--perf-model measured|ideal]
                     [--out DIR] [--json] [--via-http URL] [--cluster-id ID]

With `--json`, stdout is exactly one JSON object `{"results": [{"profile": NAME,
<metrics>}, ...]}`; otherwise a table. `--out DIR` writes a report with plots
and the per-job records. `--via-http URL` sends every snapshot to a running
service (`POST URL/v1/decisions`) instead of the engine in this process; the
metrics are the same for the same seed. The service keeps policy state per
cluster id, so each profile's run through it carries an id of its own (a fresh
`sim-<spec name>-<8 hex digits>` unless `--cluster-id` names one; see
:mod:`simulator.cluster_ids`): a replay starts from empty state and never reads or
writes a live cluster's. A progress bar goes to stderr when it is a terminal (never
with `--json`).

The further options fill what traces lack and tune the simulator; each is
documented in docs/simulator.md and in the module that implements it.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Never

from simulator import options
from simulator.workload import UTILITY_FORMS, UTILITY_VALUES, WorkloadError, WorkloadOptions

# The engine, the simulator's core and its reports are imported inside the functions that
# run a simulation: declaring the options (`arbiter simulate --help`) needs none of them.
if TYPE_CHECKING:
    from simulator.http_client import HttpClient
    from simulator.runner import RunConfig


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of `arbiter simulate` (the fixed ones of DESIGN §7 first)."""
    parser.add_argument("--trace", required=True, help="Trace CSV in the common schema (or .gz).")
    parser.add_argument("--cluster", required=True, help="Cluster spec JSON (shared/clusters).")
    parser.add_argument(
        "--profile",
        action="append",
        required=True,
        metavar="NAME",
        help="Profile to simulate; repeat for several (run on the same jobs and seed).",
    )
    parser.add_argument(
        "--max-jobs", type=options.count, default=None, help="Only the first N jobs."
    )
    parser.add_argument(
        "--seed", type=options.seed, default=0, help="Seed of every random draw (0 to 2^31-1)."
    )
    parser.add_argument(
        "--perf-model",
        choices=("measured", "ideal"),
        default="measured",
        help="measured: the effects of docs/performance-model.md; ideal: none of them.",
    )
    parser.add_argument("--out", type=Path, default=None, help="Write a report into DIR.")
    parser.add_argument(
        "--json", action="store_true", help="Print one JSON object with every profile's metrics."
    )
    parser.add_argument(
        "--via-http",
        metavar="URL",
        default=None,
        help="Ask a running service (POST URL/v1/decisions) instead of the in-process engine.",
    )
    parser.add_argument(
        "--cluster-id",
        metavar="ID",
        default=None,
        help=(
            "Cluster id of the simulation's snapshots: where a service keeps the run's "
            "policy state (1-255 characters, as the snapshot schema's `cluster_id`); it "
            "changes no metric. In process: the spec's name by "
            "default. With --via-http: a fresh sim-<spec name>-<8 hex digits> per profile "
            "run by default, so each replay starts from empty state and never touches a "
            "live cluster's; a given ID is used as is for one profile and as ID-PROFILE for "
            "each of several (every run needs state of its own, and the name says which "
            "run it was)."
        ),
    )
    fill = parser.add_argument_group("what traces lack (docs/simulator.md)")
    fill.add_argument(
        "--model-mix",
        default="all",
        help="Model families: all, gavel, pollux, generic, a family, or a comma list.",
    )
    fill.add_argument(
        "--elastic-fraction",
        type=float,
        default=0.0,
        help="Share of jobs (seeded draw per job) that accept half to twice their workers.",
    )
    fill.add_argument(
        "--ps-fraction",
        type=float,
        default=0.0,
        help="Share of jobs (seeded draw per job) trained with parameter servers.",
    )
    fill.add_argument(
        "--estimate-error",
        type=float,
        default=0.0,
        help="Sigma of log-normal noise on duration estimates (0: perfect estimates).",
    )
    fill.add_argument(
        "--utility",
        choices=UTILITY_FORMS,
        default="none",
        help="Job utilities (OASiS, the utility metric): sigmoid decay or a step deadline.",
    )
    fill.add_argument(
        "--utility-value",
        choices=UTILITY_VALUES,
        default="gpu-hours",
        help="A utility's value: the job's GPU-hours, or a seeded priority in [1, 10].",
    )
    sim = parser.add_argument_group("simulator")
    sim.add_argument(
        "--round-period",
        type=options.seconds,
        default=60.0,
        help="Seconds between timer rounds while jobs wait (0: no timer).",
    )
    sim.add_argument(
        "--no-event-rounds",
        action="store_true",
        help="Decide on the timer only, not right after arrivals and completions.",
    )
    sim.add_argument(
        "--loan-idle",
        action="store_true",
        help=(
            "Lend idle inference servers to training (clusters with an inference pool); "
            "they return through the profile's reclaim policy when demand rises."
        ),
    )
    sim.add_argument(
        "--inference-offset",
        type=options.finite_number(),
        default=None,
        metavar="SECONDS",
        help="Point of the inference series at simulated time 0 (default: day 5 of it).",
    )
    sim.add_argument("--no-progress", action="store_true", help="No progress bar.")


def _config(args: argparse.Namespace) -> RunConfig:
    from simulator.core import SimOptions
    from simulator.inference import InferenceOptions
    from simulator.runner import RunConfig

    return RunConfig(
        seed=args.seed,
        perf_mode=args.perf_model,
        workload=WorkloadOptions(
            model_mix=args.model_mix,
            elastic_fraction=args.elastic_fraction,
            ps_fraction=args.ps_fraction,
            estimate_error=args.estimate_error,
            utility=args.utility,
            utility_value=args.utility_value,
        ),
        sim=SimOptions(round_period_s=args.round_period, rounds_on_events=not args.no_event_rounds),
        inference=InferenceOptions(loan_idle=args.loan_idle)
        if args.inference_offset is None
        else InferenceOptions(loan_idle=args.loan_idle, offset_s=args.inference_offset),
    )


def _progress_factory(
    total: int, enabled: bool
) -> Callable[[str], Callable[[int], None] | None] | None:
    if not enabled:
        return None
    from tqdm import tqdm

    bars: list[tqdm[Never]] = []

    def for_profile(name: str) -> Callable[[int], None]:
        for previous in bars:
            previous.close()
        bar: tqdm[Never] = tqdm(total=total, desc=name, unit="job", file=sys.stderr, leave=True)
        bars.append(bar)

        def advance(count: int) -> None:
            bar.update(count)

        return advance

    return for_profile


def run_simulate(args: argparse.Namespace, *, http_client: HttpClient | None = None) -> int:
    """Run `arbiter simulate`; returns the exit status (0 ok, 2 bad input, 1 failure).

    `http_client` answers for the service of `--via-http` instead of a connection opened
    on its URL (tests pass the service's TestClient).
    """
    from simulator.cluster import ClusterSpecError, load_cluster
    from simulator.cluster_ids import run_cluster_ids
    from simulator.core import SimulationError
    from simulator.deciders import (
        Decider,
        DecisionServiceError,
        EngineDecider,
        HttpDecider,
        UnknownProfileError,
        shipped_profiles,
    )
    from simulator.metrics import SimulationResult
    from simulator.report import metrics_table, results_json, write_report
    from simulator.runner import simulate
    from simulator.traces import TraceError, read_trace

    try:
        config = _config(args)
        config.workload.check()
        trace = read_trace(args.trace, args.max_jobs)
        cluster = load_cluster(args.cluster)
        names: Sequence[str] = args.profile
        if args.via_http is None:
            known = shipped_profiles()
            unknown = [n for n in names if n not in known]
            if unknown:
                raise UnknownProfileError(
                    f"unknown profile {unknown[0]!r}; known: {', '.join(sorted(known))}"
                )
    except (TraceError, ClusterSpecError, WorkloadError, UnknownProfileError, OSError) as error:
        print(f"arbiter simulate: error: {error}", file=sys.stderr)
        return 2
    try:
        cluster_ids = run_cluster_ids(
            names, cluster.name, chosen=args.cluster_id, via_service=args.via_http is not None
        )
    except ValueError as error:
        print(f"arbiter simulate: error: --cluster-id: {error}", file=sys.stderr)
        return 2

    clients: list[HttpDecider] = []

    def decider_for(name: str) -> Decider:
        if args.via_http is None:
            return EngineDecider.named(name)
        client = HttpDecider(args.via_http, name, client=http_client)
        clients.append(client)
        return client

    show_progress = not args.json and not args.no_progress and sys.stderr.isatty()
    try:
        runs = simulate(
            trace,
            cluster,
            names,
            config,
            decider_for=decider_for,
            on_progress=_progress_factory(len(trace), show_progress),
            cluster_ids=cluster_ids,
        )
    except (SimulationError, DecisionServiceError) as error:
        print(f"arbiter simulate: error: {error}", file=sys.stderr)
        return 1
    finally:
        for client in clients:
            client.close()
    pairs: list[tuple[str, SimulationResult]] = [(r.profile, r.result) for r in runs]
    # Where each run's state and decisions are in the service, for whoever looks there.
    state_at = ", ".join(f"{r.profile}: {r.cluster_id}" for r in runs)
    if args.via_http is not None and not args.json:
        print(f"cluster ids at {args.via_http}: {state_at}", file=sys.stderr)
    if args.out is not None:
        context = {
            "trace": args.trace,
            "cluster": args.cluster,
            "jobs": len(trace),
            "seed": args.seed,
            "perf model": args.perf_model,
            "model mix": args.model_mix,
            "decisions from": args.via_http or "in-process engine",
            "cluster ids": state_at,
        }
        report = write_report(args.out, pairs, context)
        if not args.json:
            print(f"report: {report}", file=sys.stderr)
    if args.json:
        sys.stdout.write(json.dumps(results_json(pairs)) + "\n")
    else:
        print(metrics_table([(name, result.metrics) for name, result in pairs]))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulator", description="Replay a GPU-cluster trace under profiles."
    )
    add_simulate_arguments(parser)
    return run_simulate(parser.parse_args(argv))
