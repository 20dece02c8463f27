"""Cross-check with published simulators: the Philly fortnight under FIFO and SJF, ideal model.

    .venv/bin/python -m evidence.evidence_peers                 # section `peers` of docs/results.md
    .venv/bin/python -m evidence.evidence_peers --max-jobs 3000 --out /tmp/results.md

Published simulators replay Philly's busiest fortnight (`philly.2w-2017-10-02.csv`,
24,137 jobs) on 640 GPUs as 80 nodes × 8, in the trace's row order, each job running
exactly its recorded duration, and never split a job that fits one node across
several. A FIFO replay there gives a mean JCT of 12,659 s and a mean queueing delay of
3,814 s. This script runs the same inputs through Arbiter: the trace on a cluster of 80
nodes × 8 GPUs (the first node group of `philly.json`, resized), `--perf-model ideal`,
seed 0, once as the shipped profiles place (consolidated placement, which splits a job
over several nodes when no single one has room, free under the ideal model) and once
with `split_jobs_that_fit_one_node=false` (such a job waits for one node, as the peers
place). `philly.json` itself (60 × 8 plus 80 × 2 GPUs) is not the peers' cluster.
"""

from __future__ import annotations

import sys

from evidence.runner import Stopwatch, add_out, command_line, machine, write_section
from policies.profiles import PolicyChoice
from simulator.cluster import ClusterSpec, load_cluster
from simulator.deciders import EngineDecider, shipped_profiles
from simulator.paths import clusters_dir, traces_dir
from simulator.runner import RunConfig, build_simulation
from simulator.traces import read_trace
from simulator.workload import make_jobs

SECTION = "peers"
TRACE = "philly.2w-2017-10-02.csv"
PEER_FIFO = {"avg_jct_s": 12_659.0, "avg_queue_s": 3_814.0}
"""A published simulator's FIFO replay of the fortnight on 80 × 8 GPUs (row order kept)."""


def peer_cluster() -> ClusterSpec:
    """80 nodes × 8 GPUs: `philly.json`'s 8-GPU node group, resized."""
    philly = load_cluster(clusters_dir() / "philly.json")
    group = philly.node_groups[0].model_copy(update={"count": 80, "gpus": 8})
    return ClusterSpec(name="philly-80x8", node_groups=(group,))


def run(profile: str, split: bool, max_jobs: int | None) -> dict[str, float]:
    trace = read_trace(traces_dir() / TRACE, max_jobs)
    config = RunConfig(seed=0, perf_mode="ideal")
    jobs = make_jobs(trace, config.workload, seed=0)
    chosen = shipped_profiles()[profile]
    if not split:
        whole = PolicyChoice(name="consolidated", params={"split_jobs_that_fit_one_node": False})
        chosen = chosen.model_copy(update={"placement": whole})
    clock = Stopwatch()
    metrics = build_simulation(jobs, peer_cluster(), config).run(EngineDecider(chosen)).metrics
    return {**metrics, "wall_s": clock.wall_s}


def render(rows: list[tuple[str, bool, dict[str, float]]], jobs: int) -> str:
    lines = [
        f"## Cross-check with published simulators (`{TRACE}`, {jobs:,} jobs, 80 × 8 GPUs)",
        "",
        "Regenerate with `make results-peers` (`evidence/evidence_peers.py`; "
        f"{machine()}). Ideal model, seed 0, trace row order.",
        "",
        "| profile | a job that fits one node | mean JCT (s) | mean queueing (s) | p95 JCT (s) "
        "| mean JCT vs peer FIFO | mean queueing vs peer FIFO |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for profile, split, m in rows:
        versus = ""
        if profile == "fifo":
            jct = m["avg_jct_s"] / PEER_FIFO["avg_jct_s"] - 1
            queue = m["avg_queue_s"] / PEER_FIFO["avg_queue_s"] - 1
            versus = f"{100 * jct:+.1f} % | {100 * queue:+.1f} %"
        else:
            versus = "– | –"
        lines.append(
            f"| {profile} | {'may be split' if split else 'waits for one node'} | "
            f"{m['avg_jct_s']:,.0f} | {m['avg_queue_s']:,.0f} | {m['p95_jct_s']:,.0f} | {versus} |"
        )
    lines += [
        f"| fifo (published simulator) | waits for one node | {PEER_FIFO['avg_jct_s']:,.0f} | "
        f"{PEER_FIFO['avg_queue_s']:,.0f} | – | | |",
        "",
        "Splitting is what the ideal model makes free and the peers never do: a job of up",
        "to 8 GPUs that finds no single node with room starts at once on the free GPUs of",
        "several. Forbidding it is what brings the ideal FIFO replay to the peers' mean JCT;",
        "the measured model keeps splitting allowed because there it has its measured cost",
        "(locality slowdown, docs/performance-model.md). What is left of the gap is not",
        "traced yet. No peer figure for SJF on these inputs is at hand, so its rows stand",
        "alone.",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = command_line(__doc__)
    parser.add_argument("--max-jobs", type=int, default=None, help="Only the first N jobs.")
    add_out(parser)
    args = parser.parse_args()
    rows = []
    for profile in ("fifo", "sjf"):
        for split in (True, False):
            metrics = run(profile, split, args.max_jobs)
            print(
                f"{profile} split={split}: mean JCT {metrics['avg_jct_s']:,.0f} s, "
                f"queue {metrics['avg_queue_s']:,.0f} s ({metrics['wall_s']:.0f} s)",
                file=sys.stderr,
            )
            rows.append((profile, split, metrics))
    jobs = int(rows[0][2]["jobs"])
    write_section(args.out, SECTION, render(rows, jobs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
