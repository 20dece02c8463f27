"""Time Aryl's reclaim and knapsack scaling in process, on `examples/large.json`.

No service, no HTTP: the pure functions the API and the simulator call, so the figures
are the policies' own cost (the decoding of a large snapshot, about 15 ms, comes on top
in the service; DESIGN §8). Each figure is the median of `--repeat` runs after one
warm-up run.

- `reclaim`: :func:`policies.common.reclaim.run_reclaim` (the policy and the re-check of its
  answer) for each reclaim policy, asking for 2 of the snapshot's loaned servers. They
  are idle in `large.json`, so it is also timed on the snapshot's running jobs after one
  `aryl` decision has grown elastic ones onto the loans.
- `scale`: the `aryl` scaling policy on every schedulable job, and on the running jobs
  alone (the queue dropped, so that GPUs are free for extra workers), with `solve_mckp`
  timed alone on the knapsack of the latter.

Usage: `python -m evidence.bench_aryl [--snapshot examples/large.json] [--repeat 20]`
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from msgspec.structs import replace

from evidence.runner import EXAMPLES, command_line
from policies.common.reclaim import run_reclaim
from policies.decision import Stage
from policies.engine import Pipeline
from policies.model import Job, JobState, Snapshot, decode_snapshot
from policies.profiles import load_profiles
from policies.protocols import Context
from policies.reclaim_models import ReclaimRequest
from policies.registry import build_registry
from policies.scaling.aryl_mckp import ArylKnapsack, solve_mckp


def median_ms(call: Callable[[], object], repeat: int) -> float:
    call()
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        times.append((time.perf_counter() - started) * 1000.0)
    return statistics.median(times)


def applied(snapshot: Snapshot) -> Snapshot:
    """`snapshot` after one `aryl` decision: the jobs it places run where it put them."""
    registry = build_registry()
    decision = Pipeline.build(load_profiles(registry)["aryl"], registry).decide(snapshot)
    placed = {entry.job_id: entry.assignments for entry in decision.placement}
    jobs = []
    for job in snapshot.jobs:
        if job.id in placed:
            update = {"state": JobState.RUNNING, "placement": placed[job.id], "admitted": True}
        elif job.state is JobState.RUNNING:
            update = {"state": JobState.SUSPENDED, "placement": ()}
        else:
            update = {}
        jobs.append(replace(job, **update))
    return with_jobs(snapshot, jobs)


def with_jobs(snapshot: Snapshot, jobs: Sequence[Job]) -> Snapshot:
    # A new Struct: its cached lookups are built afresh for the new jobs.
    return replace(snapshot, jobs=tuple(jobs))


def schedulable(snapshot: Snapshot) -> list[Job]:
    return [j for j in snapshot.jobs if j.state is not JobState.PENDING or j.admitted]


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--snapshot", type=Path, default=EXAMPLES / "large.json")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    snapshot = decode_snapshot(args.snapshot.read_bytes())
    registry = build_registry()
    loaned = [n.id for n in snapshot.nodes if n.loaned]
    running_only = with_jobs(snapshot, [j for j in snapshot.jobs if j.state is JobState.RUNNING])
    grown = applied(running_only)
    on_loans = sum(
        1 for j in grown.jobs for a in j.placement if grown.nodes_by_id[a.node_id].loaned
    )
    print(
        f"{args.snapshot}: {len(snapshot.nodes)} nodes, {len(snapshot.jobs)} jobs, "
        f"{len(loaned)} loaned; after one aryl decision {on_loans} job placements on loans"
    )

    print("\nreclaim of 2 servers (run_reclaim: policy + answer check), median ms")
    two = ReclaimRequest(count=2)
    for spec in registry.specs(Stage.RECLAIM):
        policy = registry.reclaim(spec.name)
        idle = median_ms(partial(run_reclaim, policy, snapshot, two), args.repeat)
        busy = median_ms(partial(run_reclaim, policy, grown, two), args.repeat)
        answer = run_reclaim(policy, grown, two)
        print(
            f"  {spec.name:12s} idle loans: {idle:6.2f}   after a round: {busy:6.2f}  "
            f"(shrink {len(answer.shrink)}, preempt {len(answer.preempt)})"
        )

    print("\naryl scaling (multiple-choice knapsack), median ms")
    scaling = ArylKnapsack(ArylKnapsack.Params())
    jobs = schedulable(snapshot)
    context = Context(snapshot=snapshot)
    all_ms = median_ms(lambda: scaling.scale(context, jobs), args.repeat)
    print(f"  all {len(jobs)} schedulable jobs: {all_ms:7.2f}")
    running_jobs = list(running_only.jobs)
    running_ctx = Context(snapshot=running_only)
    results = scaling.scale(running_ctx, running_jobs)
    grown_jobs = sum(
        1 for r, j in zip(results, running_jobs, strict=True) if r.workers > j.placed_workers
    )
    print(
        f"  {len(running_jobs)} running jobs only: "
        f"{median_ms(lambda: scaling.scale(running_ctx, running_jobs), args.repeat):7.2f}"
        f"  ({grown_jobs} jobs grown)"
    )
    classes, capacity = knapsack_of(running_only)
    print(
        f"  solve_mckp alone, {len(classes)} classes, {capacity} GPUs: "
        f"{median_ms(lambda: solve_mckp(classes, capacity), args.repeat):7.2f}"
    )
    return 0


def knapsack_of(snapshot: Snapshot) -> tuple[list[list[tuple[int, float]]], int]:
    """The classes and capacity the aryl scaling policy solves for running jobs only."""
    free = sum(n.gpus for n in snapshot.nodes if n.schedulable_for_training)
    classes = []
    for job in snapshot.jobs:
        free -= job.placed_gpus
        base = job.placed_workers
        now = job.remaining_time_s(base)
        if not job.elastic or now is None:
            continue
        items = [(0, 0.0)]
        for count in job.allowed_worker_counts():
            after = job.remaining_time_s(count)
            if count > base and after is not None:
                items.append(((count - base) * job.gpus_per_worker, now - after))
        if len(items) > 1:
            classes.append(items)
    return classes, max(0, free)


if __name__ == "__main__":
    sys.exit(main())
