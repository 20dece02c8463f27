"""Benchmark the simulator: the 10,000-job target, every profile's speed, where the time goes.

    .venv/bin/python scripts/bench_simulator.py                 # print Markdown
    .venv/bin/python scripts/bench_simulator.py --write docs/benchmarks.md

1. Target: the first 10,000 jobs of `helios_venus.full.csv` on its cluster
   (`helios_venus-full.json`, 1,024 GPUs) with the `tiresias` profile, measured
   model, seed 0 — wall time, jobs/s, decisions/s.
2. Every shipped profile on a smaller window of the same trace: jobs/s,
   decisions/s, decision latency.
3. A cProfile of the tiresias run on the window, its own time grouped by
   where it is spent (the engine and its policies, the simulator, pydantic).

`--write FILE` replaces the `## Simulator` section of FILE (creating the file
or appending the section if needed), leaving every other section alone.
"""

from __future__ import annotations

import argparse
import cProfile
import platform
import pstats
import re
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from simulator.cluster import load_cluster  # noqa: E402
from simulator.deciders import EngineDecider, shipped_profiles  # noqa: E402
from simulator.paths import clusters_dir, traces_dir  # noqa: E402
from simulator.report import fmt  # noqa: E402
from simulator.runner import RunConfig, build_simulation  # noqa: E402
from simulator.traces import read_trace  # noqa: E402
from simulator.workload import make_jobs  # noqa: E402

TRACE = "helios_venus.full.csv"
CLUSTER = "helios_venus-full.json"
SECTION = "## Simulator"


def _run(profile: str, jobs: int) -> dict[str, float]:
    trace = read_trace(traces_dir() / TRACE, jobs)
    cluster = load_cluster(clusters_dir() / CLUSTER)
    config = RunConfig(seed=0)
    specs = make_jobs(trace, config.workload, seed=config.seed)
    sim = build_simulation(specs, cluster, config)
    decider = EngineDecider.named(profile)
    started = time.perf_counter()
    result = sim.run(decider)
    wall = time.perf_counter() - started
    m = result.metrics
    return {
        "jobs": float(m["jobs"]),
        "decisions": float(m["decisions"]),
        "wall_s": wall,
        "jobs_per_s": m["jobs"] / wall,
        "decisions_per_s": m["decisions"] / wall,
        "decision_ms_p50": m["decision_ms_p50"] or 0.0,
        "decision_ms_p99": m["decision_ms_p99"] or 0.0,
        "decide_share": m["decide_wall_s"] / wall if wall > 0 else 0.0,
    }


def _category(filename: str) -> str:
    name = filename.replace("\\", "/")
    if "/policies/engine.py" in name or "/policies/capacity.py" in name:
        return "engine (policies/engine.py, capacity.py)"
    if "/policies/model.py" in name or "/policies/decision.py" in name:
        return "domain model properties (policies/model.py, decision.py)"
    if "/policies/" in name:
        return "policies (ordering, scaling, placement, admission)"
    if "/simulator/" in name:
        return "simulator (snapshots, checks, events, perf model)"
    if "pydantic" in name:
        return "pydantic (validating engine outputs and views)"
    return "Python built-ins and standard library"


def _profile(jobs: int) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
    """(share of own time by category, share of the ten costliest functions)."""
    profiler = cProfile.Profile()
    profiler.enable()
    _run("tiresias", jobs)
    profiler.disable()
    stats = pstats.Stats(profiler)
    by: Counter[str] = Counter()
    functions: Counter[str] = Counter()
    for (filename, line, name), row in stats.stats.items():  # type: ignore[attr-defined]
        by[_category(filename)] += row[2]  # own time
        short = filename.replace(str(ROOT) + "/", "").split("site-packages/")[-1]
        functions[f"`{short}:{line}` {name}"] += row[2]
    total = sum(by.values()) or 1.0
    return (
        [(name, seconds / total) for name, seconds in by.most_common()],
        [(name, seconds / total) for name, seconds in functions.most_common(10)],
    )


def render(target_jobs: int, window: int, skip_profiles: bool) -> str:
    target = _run("tiresias", target_jobs)
    lines = [
        SECTION,
        "",
        "Regenerate with `.venv/bin/python scripts/bench_simulator.py --write docs/benchmarks.md`",
        f"(machine: {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}; the machine is shared, so expect ±20 %).",
        "",
        f"### Target: {target_jobs:,} jobs of `{TRACE}` on `{CLUSTER}`, tiresias",
        "",
        "| jobs | decisions | wall (s) | jobs/s | decisions/s | decision p50 (ms) | "
        "decision p99 (ms) | time in the engine |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
        f"| {target['jobs']:,.0f} | {target['decisions']:,.0f} | {target['wall_s']:.1f} | "
        f"{target['jobs_per_s']:.0f} | {target['decisions_per_s']:.0f} | "
        f"{target['decision_ms_p50']:.2f} | {target['decision_ms_p99']:.2f} | "
        f"≈{100 * target['decide_share']:.0f} % |",
        "",
        "Measured model, seed 0, default options (60 s timer rounds while jobs wait, a round",
        "after every arrival and every completion that finds jobs waiting). The target is",
        f"60 s: {'met' if target['wall_s'] <= 60 else 'missed'}. Almost every arrival needs",
        "its own decision (arrivals rarely share a second), so there are about as many",
        "decisions as jobs, and the time inside `Pipeline.decide` alone is "
        f"{target['decide_share'] * target['wall_s']:.0f} s",
        f"({1000 * target['decide_share'] * target['wall_s'] / target['decisions']:.1f} ms "
        "per decision, for snapshots of 50–150 jobs and 128 nodes); the simulator's own",
        "work (snapshots, checks, events) is the rest.",
    ]
    if not skip_profiles:
        lines += [
            "",
            f"### Every shipped profile, first {window:,} jobs of `{TRACE}`",
            "",
            "| profile | decisions | wall (s) | jobs/s | decisions/s | decision p50 (ms) "
            "| decision p99 (ms) |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for name in sorted(shipped_profiles()):
            row = _run(name, window)
            lines.append(
                f"| {name} | {row['decisions']:,.0f} | {row['wall_s']:.1f} | "
                f"{row['jobs_per_s']:.0f} | {row['decisions_per_s']:.0f} | "
                f"{fmt(row['decision_ms_p50'])} | {fmt(row['decision_ms_p99'])} |"
            )
    shares, functions = _profile(window)
    lines += [
        "",
        f"### Where the time goes (cProfile, tiresias, first {window:,} jobs, own time)",
        "",
        "| where | share |",
        "|---|---:|",
        *[f"| {name} | {100 * share:.1f} % |" for name, share in shares],
        "",
        "The ten costliest functions:",
        "",
        "| function | share |",
        "|---|---:|",
        *[f"| {name} | {100 * share:.1f} % |" for name, share in functions],
        "",
        "Per decision the engine copies the nodes' starting capacity (built once per node list "
        "and reused while the simulator sends the same nodes), walks every running job (holding "
        "its GPUs in one pass, checking its worker count) and creates a validated pydantic object "
        "per job and stage (`ScalingResult`, `JobExplanation`, `PlacementEntry`): its cost is "
        "linear in the snapshot, and that per-job cost, not the event loop, bounds the simulator. "
        "What brought the target run from 115 s to 50 s: the capacity layout reused across "
        "rounds, held GPUs counted node by node in one pass, `placed_gpus` computed without "
        "`cached_property`'s per-object lock (Python 3.11), job views copied from a stored dict "
        "of fields, and the stateful-policy check done once per pipeline.",
        "",
    ]
    return "\n".join(lines)


def merge_section(path: Path, section: str) -> None:
    """Replace the `## Simulator` section of `path` with `section` (or append it)."""
    text = path.read_text(encoding="utf-8") if path.exists() else "# Benchmarks\n"
    pattern = re.compile(r"^## Simulator\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    body = section.rstrip("\n") + "\n\n"
    if pattern.search(text):
        text = pattern.sub(lambda _: body, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + body
    path.write_text(text.rstrip("\n") + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=10_000, help="Jobs of the target run.")
    parser.add_argument("--window", type=int, default=2_000, help="Jobs per profile run.")
    parser.add_argument("--skip-profiles", action="store_true")
    parser.add_argument("--write", type=Path, default=None, help="Merge into this Markdown file.")
    args = parser.parse_args(argv)
    section = render(args.jobs, args.window, args.skip_profiles)
    if args.write is not None:
        merge_section(args.write, section)
        print(f"wrote the '{SECTION}' section of {args.write}", file=sys.stderr)
    else:
        print(section)
    return 0


if __name__ == "__main__":
    sys.exit(main())
