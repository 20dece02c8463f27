"""Generate `examples/dispatch.json`: a busy accelerator system, as `POST /v1/dispatch` takes it.

Plays the `heavy-mixed` scenario of the accelerator simulator (seed 0) under EDF and
keeps the first round with at least 30 pending requests and an idle sub-accelerator:
four sub-accelerators of three dataflow styles, requests of three tenants over seven
DNNs, per-layer costs from `shared/perf/maestro_layer_costs.csv`. The same code gives
the same file; `--check` compares with the committed one instead of writing.

    .venv/bin/python -m evidence.generate_dispatch_example [--check]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence

from evidence.runner import EXAMPLES, ROOT, command_line
from policies.dispatch.model import DispatchResult, DispatchSnapshot
from policies.model import to_builtins
from simulator.accelerator.costs import load_costs
from simulator.accelerator.dispatchers import InProcessDispatcher
from simulator.accelerator.system import run_episode
from simulator.accelerator.workload import arrivals, scenarios

OUT = EXAMPLES / "dispatch.json"


class _Catch:
    """EDF, keeping the first busy snapshot it is shown."""

    def __init__(self) -> None:
        self.edf = InProcessDispatcher("edf")
        self.name = "edf"
        self.found: DispatchSnapshot | None = None

    def __call__(self, snapshot: DispatchSnapshot) -> DispatchResult:
        idle = any(a.running is None for a in snapshot.accelerators)
        if self.found is None and len(snapshot.requests) >= 30 and idle:
            self.found = snapshot
        return self.edf(snapshot)


def example() -> str:
    scenario = scenarios()["heavy-mixed"]
    costs = load_costs()
    catch = _Catch()
    run_episode(scenario, costs, arrivals(scenario, costs, 0), catch)
    assert catch.found is not None, "no busy round in the episode"
    body = {"profile": "relmas", "snapshot": to_builtins(catch.found)}
    return json.dumps(body, indent=1) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args(argv)
    text = example()
    if args.check:
        if OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} differs from what this script writes", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
