"""Placing a job with CPU or memory needs on several nodes: a list or arrays, by size.

    .venv/bin/python -m evidence.bench_placement_paths
    .venv/bin/python -m evidence.bench_placement_paths --nodes 16,64,128,256 --repeat 7

`consolidated` places such a job (one no single node holds) on the fewest nodes, within
one rack where that costs no extra node. Two forms give the same picks
(tests/policies/test_placement.py): :func:`~policies.placement.consolidated.picks_from_list`
walks a list of the candidate nodes, and
:func:`~policies.placement.consolidated.picks_from_fits` works on the fits of every node
as arrays, whose NumPy calls cost some microseconds each whatever their size. The
policy takes the list when at most `LISTED_CANDIDATES` nodes have a worker's GPUs free;
this command shows where the two cross.

For each size, a generated snapshot (the growth benchmark's, `evidence.bench_growth`;
16 nodes: `examples/small.json`, 512: `examples/large.json`), twice: with its running
jobs' GPUs taken (busy: few nodes have room) and with none taken (empty: every node is
a candidate); the first job that needs CPUs or memory per worker, and 1, a quarter, a
half and all of the workers that fit: the time per call of each form (its room and its picks,
as the policy asks), the least mean over `--repeat` rounds of `--number` calls. A
difference of the two forms' picks stops the command.
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from functools import partial
from typing import NamedTuple

from evidence import generate_examples
from evidence.bench_engine import fresh_snapshot
from evidence.runner import EXAMPLES, add_quiet, command_line, machine, progress
from policies.capacity import FreeCapacity
from policies.model import JobState
from policies.placement.consolidated import LISTED_CANDIDATES, picks_from_fits, picks_from_list

DEFAULT_NODES = "16,64,128,256,512,1024"


class Row(NamedTuple):
    """One worker count at one size: both forms' time per call."""

    candidates: int  # nodes with a worker's GPUs free, as the policy counts them
    workers: int
    room: int  # workers of the job that fit in all
    arrays_us: float
    list_us: float


def _snapshot_raw(nodes: int) -> bytes:
    """The snapshot measured at this size."""
    if nodes == 16:
        return (EXAMPLES / "small.json").read_bytes()
    if nodes == 512:
        return (EXAMPLES / "large.json").read_bytes()
    # Imported here: the growth benchmark loads matplotlib, which the examples don't need.
    from evidence.bench_growth import snapshot_bytes  # noqa: PLC0415

    return snapshot_bytes(nodes, nodes * 5, generate_examples.DEFAULT_SEED, None)


def measure(nodes: int, number: int, repeat: int, *, busy: bool) -> list[Row]:
    """A row for each worker count at this size."""
    snapshot = fresh_snapshot(_snapshot_raw(nodes))
    free = FreeCapacity.for_training(snapshot)
    if busy:
        free.take_held([(j, j.placement) for j in snapshot.jobs if j.state is JobState.RUNNING])
    job = next(j for j in snapshot.jobs if j.cpus_per_worker > 0 or j.memory_gb_per_worker > 0)
    room = free.room(job)
    candidates = free.count_with_free(job.gpus_per_worker)
    rows: list[Row] = []
    for workers in sorted({1, max(1, room // 4), max(1, room // 2), room}):
        if room == 0:
            break
        arrays = partial(picks_from_fits, job, workers, free)
        listed = partial(picks_from_list, job, workers, free)
        if arrays() != listed():
            raise SystemExit(f"{nodes} nodes, {workers} workers: the two forms pick differently")
        arrays_us = _per_call_us(arrays, number, repeat)
        rows.append(Row(candidates, workers, room, arrays_us, _per_call_us(listed, number, repeat)))
    return rows


def _per_call_us(call: Callable[[], object], number: int, repeat: int) -> float:
    return min(timeit.repeat(call, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    parser = command_line(__doc__)
    parser.add_argument("--nodes", default=DEFAULT_NODES, help=f"sizes (default {DEFAULT_NODES})")
    parser.add_argument("--number", type=int, default=100, help="calls per round")
    parser.add_argument("--repeat", type=int, default=5, help="rounds; the least mean is kept")
    add_quiet(parser)
    args = parser.parse_args()
    say = progress(args.quiet)
    print(f"Machine: {machine()}. The policy lists up to {LISTED_CANDIDATES} candidates.\n")
    print("| nodes | cluster | candidates | workers | room | arrays µs | list µs | faster |")
    print("|---:|---|---:|---:|---:|---:|---:|---|")
    for nodes in (int(n) for n in args.nodes.split(",")):
        for busy in (True, False):
            state = "busy" if busy else "empty"
            say(f"{nodes} nodes, {state}")
            for row in measure(nodes, args.number, args.repeat, busy=busy):
                faster = "list" if row.list_us < row.arrays_us else "arrays"
                print(
                    f"| {nodes} | {state} | {row.candidates} | {row.workers} | {row.room} "
                    f"| {row.arrays_us:.1f} | {row.list_us:.1f} | {faster} |"
                )


if __name__ == "__main__":
    main()
