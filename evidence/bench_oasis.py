"""Time the `oasis` profile in process on a snapshot, round after round, with its state.

Round 1 decides the snapshot from empty state (every pending job not yet admitted
is judged at once: the worst case). Round 2 applies round 1 as a caller would
(placed jobs run, verdicts recorded, rejected jobs leave), moves the clock by a
minute and decides again with the kept state (nothing new to judge). Round 3 adds
one arrival. `fifo-backfill` on the round-3 snapshot is timed for scale. Each time
is the median of `--repeat` runs of `Pipeline.run`, wall clock and CPU time.

Usage: `.venv/bin/python -m evidence.bench_oasis [--snapshot examples/large.json]`
(figures in docs/oasis.md).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from msgspec.structs import replace

from policies.decision import Decision, Stage, Verdict
from policies.engine import Outcome, Pipeline
from policies.model import Job, JobState, Snapshot, convert, decode_snapshot, encode
from policies.profiles import load_profiles
from policies.registry import build_registry

T = TypeVar("T")


def timed(run: Callable[[], T], repeat: int) -> tuple[T, str]:
    """The last result of `run` and the median time it took, wall clock and (in
    brackets) CPU time, which other processes of a shared machine disturb less."""
    seconds, cpu = [], []
    result = run()
    for _ in range(repeat):
        started, started_cpu = time.perf_counter(), time.process_time()
        result = run()
        seconds.append(time.perf_counter() - started)
        cpu.append(time.process_time() - started_cpu)
    wall_ms, cpu_ms = statistics.median(seconds) * 1e3, statistics.median(cpu) * 1e3
    return result, f"{wall_ms:.0f} ms (CPU {cpu_ms:.0f} ms)"


def applied(
    snapshot: Snapshot, decision: Decision, advance_s: float, extra: tuple[Job, ...]
) -> Snapshot:
    """The next snapshot a caller sends once `decision` is applied (no job finishes)."""
    verdicts = {a.job_id: a.verdict for a in decision.admission}
    placed = {p.job_id: p.assignments for p in decision.placement}
    jobs: list[Job] = []
    for job in snapshot.jobs:
        verdict = verdicts.get(job.id)
        if verdict is Verdict.REJECT:
            continue
        update: dict[str, object] = {"admitted": job.admitted or verdict is Verdict.ADMIT}
        if Stage.PLACEMENT in decision.stages:
            if job.id in placed:
                update.update(state=JobState.RUNNING, placement=placed[job.id])
            elif job.state is JobState.RUNNING:
                update.update(state=JobState.SUSPENDED, placement=())
        jobs.append(replace(job, **update))
    return Snapshot(
        cluster_id=snapshot.cluster_id,
        now=snapshot.now + advance_s,
        nodes=snapshot.nodes,
        jobs=(*jobs, *extra),
        tenants=snapshot.tenants,
        inference=snapshot.inference,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--snapshot", type=Path, default=Path("examples/large.json"))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    registry = build_registry()
    profiles = load_profiles(registry)
    oasis = Pipeline.build(profiles["oasis"], registry)
    snapshot = decode_snapshot(args.snapshot.read_bytes())

    first: Outcome
    first, took = timed(lambda: oasis.run(snapshot), args.repeat)
    judged = first.decision.admission
    print(
        f"round 1: {len(judged)} arrivals judged ({sum(a.admitted for a in judged)} admitted) "
        f"from empty state: {took}; state {len(encode(first.state)) / 1e3:.0f} KB"
    )
    later = applied(snapshot, first.decision, 60.0, ())
    second, took = timed(lambda: oasis.run(later, state=first.state), args.repeat)
    print(f"round 2: nothing new to judge, state reconciled: {took}")
    arrival = convert(
        {
            "id": "bench-arrival",
            "submit_time": later.now,
            "workers": 4,
            "max_workers": 8,
            "estimated_duration_s": 7200,
        },
        Job,
    )
    third_snapshot = applied(later, second.decision, 60.0, (arrival,))
    _, took = timed(lambda: oasis.run(third_snapshot, state=second.state), args.repeat)
    print(f"round 3: one arrival: {took}")
    fifo = Pipeline.build(profiles["fifo-backfill"], registry)
    _, took = timed(lambda: fifo.decide(third_snapshot), args.repeat)
    print(f"for scale, fifo-backfill on the round-3 snapshot: {took}")


if __name__ == "__main__":
    main()
