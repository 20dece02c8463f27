"""Decision time of every dispatch policy for 64 pending requests, on one core.

    .venv/bin/python -m evidence.bench_relmas [--repeat 2000]

The snapshot: the `heavy-mixed` system (two weight-stationary, one output-stationary,
one row-stationary sub-accelerator), 64 pending requests of the scenario's tenants
and models at various layers, and one sub-accelerator busy, so RELMAS scores 64 × ~3
candidate pairs. Timed: the whole of :func:`policies.dispatch.run.run_dispatch` (the
view, the policy, the contract check and the explanation of every request), which is
what the service and the simulator call; then the service's path without HTTP
(decode and validate the body, dispatch, encode the answer). Prints p50 / p99 in ms.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence

import numpy as np
import torch

from app.schemas import DispatchRequestBody
from app.services.decisions import SnapshotLimits
from app.services.dispatch import check_dispatch_snapshot
from evidence.runner import command_line
from policies.dispatch.model import (
    DispatchSnapshot,
    DispatchTenant,
    PendingInference,
    RunningLayer,
    SubAccelerator,
)
from policies.dispatch.run import DispatchPair, build_dispatch, run_dispatch
from policies.model import decode, encode
from policies.profiles import load_profiles
from policies.registry import build_registry
from simulator.accelerator.costs import load_costs
from simulator.accelerator.workload import arrivals, scenarios

PROFILES = ("fcfs", "edf", "llf", "eft-greedy", "prema", "relmas")


def snapshot_with(pending: int) -> DispatchSnapshot:
    scenario = scenarios()["heavy-mixed"]
    costs = load_costs()
    rng = np.random.default_rng(0)
    work = arrivals(scenario, costs, 0)[:pending]
    now = work[-1].arrival
    requests = []
    for a in work:
        layers = len(costs.models[a.model].layers)
        requests.append(
            PendingInference(
                id=a.id,
                model=a.model,
                tenant=a.tenant,
                next_layer=int(rng.integers(0, layers)),
                arrival=a.arrival,
                deadline=a.deadline,
            )
        )
    first = requests[0]
    layer = costs.models[first.model].layers[first.next_layer]
    busy_style = layer.costs[0].style
    accelerators: list[SubAccelerator] = []
    for i, style in enumerate(scenario.accelerators):
        running = None
        if style == busy_style and not any(a.running for a in accelerators):
            running = RunningLayer(request_id=first.id, layer=first.next_layer, remaining_s=1e-3)
        accelerators.append(SubAccelerator(id=f"{style}{i}", style=style, running=running))
    return DispatchSnapshot(
        system_id="bench",
        now=now,
        dram_bandwidth_gbps=scenario.dram_gbps,
        accelerators=tuple(accelerators),
        models=tuple(costs.models[m] for m in sorted({r.model for r in requests})),
        tenants=tuple(DispatchTenant(id=t.id, priority=t.priority) for t in scenario.tenants),
        requests=tuple(requests),
    )


def timed(call: Callable[[], object], repeat: int) -> tuple[float, float]:
    for _ in range(min(50, repeat)):
        call()
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000.0)
    return float(np.percentile(samples, 50)), float(np.percentile(samples, 99))


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--repeat", type=int, default=2000)
    parser.add_argument("--pending", type=int, default=64)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    snapshot = snapshot_with(args.pending)
    registry = build_registry()
    pairs = build_dispatch(registry, load_profiles(registry))
    body = b'{"profile":"relmas","snapshot":' + encode(snapshot) + b"}"
    print(
        f"{len(snapshot.requests)} pending requests, {len(snapshot.accelerators)} "
        f"sub-accelerators, {len(body):,} bytes of JSON; one core; ms over {args.repeat} runs"
    )
    print("| profile | run_dispatch p50 | p99 | decode+check+dispatch+encode p50 | p99 |")
    print("|---|---|---|---|---|")
    limits = SnapshotLimits()
    for profile in PROFILES:
        pair = pairs[profile]
        result, _ = run_dispatch(pair.policy, snapshot, pair.fallback)
        assert result.fallback is None, result.fallback

        def core(pair: DispatchPair = pair) -> object:
            return run_dispatch(pair.policy, snapshot, pair.fallback)

        def service(pair: DispatchPair = pair) -> object:
            request = decode(body, DispatchRequestBody)
            check_dispatch_snapshot(request.snapshot, limits)
            answer, _ = run_dispatch(pair.policy, request.snapshot, pair.fallback)
            return encode(answer)

        c50, c99 = timed(core, args.repeat)
        s50, s99 = timed(service, max(1, args.repeat // 4))
        print(f"| {profile} | {c50:.3f} | {c99:.3f} | {s50:.3f} | {s99:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
