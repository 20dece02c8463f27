"""The golden set: decisions and simulation metrics that a faster core must reproduce exactly.

Recorded once from a trusted core with ``python -m tests.golden.record`` (``make golden``)
and replayed by ``tests/golden/test_golden_set.py``. It holds:

* every shipped profile's full decision (admission, ordering, scaling, placement,
  preemptions, pending reasons, explanations) on every example snapshot;
* snapshots taken from simulator runs of each shared trace under every profile, with
  the policy state the run had kept, and the decision and state update each got;
* the reclaim answers of the loaning scenario;
* the metrics of each of those short simulations (wall-clock figures left out).

Everything is stored as JSON (gzip), the wire format, so the set outlives any change
of the Python types behind it. Rerun the recorder only for an intended change of
behaviour, in its own commit that says why.
"""

from __future__ import annotations

import argparse
import gzip
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from evidence.generate_examples import (
    every_waiting_job,
    wide_jobs_with_servers,
    widen_waiting_jobs,
)
from policies.decision import ENGINE_STAGES, Decision
from policies.engine import Pipeline
from policies.model import Snapshot, ThroughputObservation, to_builtins
from policies.profiles import Profile
from policies.reclaim_models import ReclaimRequest, ReclaimResult
from policies.registry import Registry, build_registry
from simulator.cluster import ClusterSpec, load_cluster
from simulator.deciders import EngineDecider, shipped_profiles
from simulator.inference import InferenceOptions
from simulator.metrics import TIMING_KEYS
from simulator.paths import shared_dir
from simulator.runner import RunConfig, build_simulation
from simulator.traces import compress_arrivals, read_trace
from simulator.workload import JobSpec, WorkloadOptions, make_jobs
from tests.golden.wire import (
    decision_json,
    reclaim_json,
    reclaim_request_from,
    snapshot_from,
    snapshot_json,
    state_json,
)

HERE = Path(__file__).resolve().parent
EXAMPLES = HERE.parents[1] / "examples"
GOLDEN_FILE = HERE / "golden.json.gz"
EXAMPLE_SNAPSHOTS = ("small", "large", "decision-request", "reclaim")
WIDE_EXAMPLES = {"small": 3, "large": 40}
"""Examples whose waiting jobs, every so many, accept wide ranges of worker counts
(`evidence.generate_examples.widen_waiting_jobs`)."""
CAPTURES_PER_RUN = 6
CAPTURE_EVERY = 7


@dataclass(frozen=True)
class Scenario:
    """A short, loaded window of a shared trace on its paired cluster."""

    name: str
    trace: str
    cluster: str
    jobs: int
    compress: float
    scale: float
    """Fraction of each node group kept (at least one node), to make the window queue."""
    workload: WorkloadOptions = field(default_factory=WorkloadOptions)
    inference: InferenceOptions = field(default_factory=InferenceOptions)
    profiles: tuple[str, ...] | None = None  # None: every shipped profile


SCENARIOS = (
    Scenario("philly", "philly.2w-2017-10-02.csv", "philly.json", 150, 4.0, 0.1),
    Scenario(
        "helios",
        "helios_venus.1w-2020-06-01.csv",
        "helios_venus.json",
        150,
        4.0,
        0.1,
        WorkloadOptions(elastic_fraction=0.5, estimate_error=0.3),
    ),
    Scenario(
        "itp",
        "itp_cluster04.2w-day14.csv",
        "itp.json",
        150,
        4.0,
        0.1,
        WorkloadOptions(elastic_fraction=0.5, ps_fraction=0.5),
    ),
    Scenario(
        "alibaba",
        "alibaba_openb.2w-day135.csv",
        "alibaba_openb.json",
        120,
        4.0,
        0.25,
        WorkloadOptions(utility="sigmoid", utility_value="priority", elastic_fraction=0.3),
    ),
    Scenario(
        "loaning",
        "philly.2w-2017-10-02.csv",
        "philly-loaning.json",
        150,
        4.0,
        0.1,
        WorkloadOptions(elastic_fraction=0.5),
        InferenceOptions(loan_idle=True),
        ("aryl", "static", "fifo", "tiresias"),
    ),
)


class Recorder:
    """Wraps a decider: answers as it does, and keeps some rounds' inputs and outputs.

    It does not pass on the decider's `settles`: the simulator asks it every round. It
    passes on `gathers`, which adds rounds (a completion while a spread job runs) that
    change what a gathering pipeline does.
    """

    def __init__(self, inner: EngineDecider, scenario: str) -> None:
        self.inner = inner
        self.scenario = scenario
        self.rounds = 0
        self.decisions: list[dict[str, Any]] = []
        self.reclaims: list[dict[str, Any]] = []

    @property
    def gathers(self) -> bool:
        return self.inner.gathers

    def observe(self, observations: Sequence[ThroughputObservation]) -> None:
        """Feedback between rounds reaches the wrapped decider, as in an unwrapped run."""
        self.inner.observe(observations)

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
        keys = self.inner.pipeline.state_keys
        state_in = state_json({k: self.inner.state[k] for k in keys if k in self.inner.state})
        decision = self.inner(snapshot, seed, decision_id)
        if self.rounds % CAPTURE_EVERY == 0 and len(self.decisions) < CAPTURES_PER_RUN:
            # The simulator asks for no explanations; the golden case keeps the whole
            # decision, reasons included, as the service gives it for the same input.
            explained = self.inner.pipeline.run(
                snapshot, state=state_in, seed=seed, decision_id=decision_id
            )
            self.decisions.append(
                {
                    "case": f"{self.scenario}/{self.inner.profile.name}/round-{self.rounds}",
                    "profile": self.inner.profile.name,
                    "snapshot": snapshot_json(snapshot),
                    "state": state_in,
                    "seed": seed,
                    "decision_id": decision_id,
                    "decision": decision_json(explained.decision),
                    "state_after": state_json(
                        {k: self.inner.state[k] for k in keys if k in self.inner.state}
                    ),
                }
            )
        self.rounds += 1
        return decision

    def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
        answer = self.inner.reclaim(snapshot, request, seed)
        self.reclaims.append(
            {
                "case": f"{self.scenario}/{self.inner.profile.name}/reclaim-{len(self.reclaims)}",
                "profile": self.inner.profile.name,
                "snapshot": snapshot_json(snapshot),
                "request": to_builtins(request),
                "seed": seed,
                "answer": reclaim_json(answer),
            }
        )
        return answer


def scenario_config(scenario: Scenario) -> RunConfig:
    return RunConfig(seed=7, workload=scenario.workload, inference=scenario.inference)


def scenario_jobs(scenario: Scenario) -> list[JobSpec]:
    traces = shared_dir() / "traces"
    rows = compress_arrivals(read_trace(traces / scenario.trace, scenario.jobs), scenario.compress)
    return make_jobs(rows, scenario.workload, seed=scenario_config(scenario).seed)


def scenario_cluster(scenario: Scenario) -> ClusterSpec:
    spec = load_cluster(shared_dir() / "clusters" / scenario.cluster)
    groups = tuple(
        group.model_copy(update={"count": max(1, round(group.count * scenario.scale))})
        for group in spec.node_groups
    )
    return spec.model_copy(update={"node_groups": groups})


def scenario_profiles(scenario: Scenario) -> list[str]:
    return list(scenario.profiles or sorted(shipped_profiles()))


def example_snapshot(name: str) -> Snapshot:
    """An example file's snapshot: the file itself, or the `snapshot` of a request file."""
    data = json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))
    return snapshot_from(data.get("snapshot", data))


def wide_snapshot(name: str) -> Snapshot:
    """`name`'s example with every so many waiting jobs elastic over a wide range."""
    data = json.loads((EXAMPLES / f"{name}.json").read_text(encoding="utf-8"))
    return snapshot_from(widen_waiting_jobs(data.get("snapshot", data), WIDE_EXAMPLES[name]))


UNHURRIED_MS = 3_600_000.0
"""The latency budget of a learned policy in the golden set: an hour."""


def unhurried(profile: Profile, registry: Registry) -> Profile:
    """`profile` with every stage policy that has a latency budget given an hour.

    A learned policy past its budget hands the decision to the profile's fallback,
    which depends on how fast and how busy the machine is, not on the code: a slow or
    loaded machine would fail the set for it. The set holds what the policies decide
    given the time (each was recorded well within the shipped budgets).
    """
    changed: dict[str, Any] = {}
    for stage in ENGINE_STAGES:
        choice = getattr(profile, stage.value)
        if "latency_budget_ms" in registry.spec(stage, choice.name).info.Params.model_fields:
            params = {**choice.params, "latency_budget_ms": UNHURRIED_MS}
            changed[stage.value] = choice.model_copy(update={"params": params})
    return profile.model_copy(update=changed) if changed else profile


def _every_profile_on(
    group: str, source: str, snapshots: Iterable[tuple[str, Snapshot]], ids: str
) -> Iterator[dict[str, Any]]:
    """Every shipped profile's decision on each named snapshot, from an empty state; a
    case names its snapshot under `source` (the test rebuilds it from that name)."""
    profiles = shipped_profiles()
    registry = build_registry()
    for name, snapshot in snapshots:
        decision_id = f"{ids}{name}"
        for profile in sorted(profiles):
            pipeline = Pipeline.build(unhurried(profiles[profile], registry), registry)
            outcome = pipeline.run(snapshot, decision_id=decision_id, seed=3)
            yield {
                "case": f"{group}/{name}/{profile}",
                "profile": profile,
                source: name,
                "state": {},
                "seed": 3,
                "decision_id": decision_id,
                "decision": decision_json(outcome.decision),
                "state_after": state_json(outcome.state),
            }


SERVER_JOBS_EVERY = 3
"""Every so many waiting jobs of the small example, in the `servers` cases, accept up to
4,096 workers and place parameter servers."""


def server_snapshot(name: str) -> Snapshot:
    """The small example with jobs of up to 4,096 workers that place parameter servers:

    * `small`: servers, not workers, bound the counts that fit (a worker:server ratio of
      0.01 makes each count need 100 servers per worker): OASiS must find that almost
      none of their counts fits, exactly;
    * `small-capped`: two to four servers (`wide_jobs_with_servers`), so that every
      count's servers fit, each placed on what that count's workers leave.
    """
    data = json.loads((EXAMPLES / "small.json").read_text(encoding="utf-8"))
    if name == "small-capped":
        return snapshot_from(wide_jobs_with_servers(data, SERVER_JOBS_EVERY))
    if name != "small":
        raise ValueError(f"no server snapshot named {name!r}")
    data, chosen = every_waiting_job(data, SERVER_JOBS_EVERY)
    for job in chosen:
        job.update(
            workers=1, min_workers=1, max_workers=4096, ps=2, workers_per_ps=0.01, ps_cpus=1.0
        )
        job.pop("scaling_rule", None)
        job.pop("worker_step", None)
        job.pop("max_ps", None)
    return snapshot_from(data)


def example_cases() -> Iterator[dict[str, Any]]:
    named = ((name, example_snapshot(name)) for name in EXAMPLE_SNAPSHOTS)
    return _every_profile_on("examples", "example", named, "golden-")


def wide_cases() -> Iterator[dict[str, Any]]:
    named = ((name, wide_snapshot(name)) for name in WIDE_EXAMPLES)
    yield from _every_profile_on("wide", "wide", named, "golden-wide-")
    servers = [("small", server_snapshot("small"))]
    yield from _every_profile_on("servers", "servers", servers, "golden-servers-")
    capped = [("small-capped", server_snapshot("small-capped"))]
    yield from _every_profile_on("servers", "servers", capped, "golden-servers-")


def example_reclaims() -> Iterator[dict[str, Any]]:
    """`examples/reclaim.json` under every profile's reclaim policy, by count and by node."""
    data = json.loads((EXAMPLES / "reclaim.json").read_text(encoding="utf-8"))
    snapshot = snapshot_from(data["snapshot"])
    loaned = [n.id for n in snapshot.nodes if n.loaned]
    requests = [{"count": data["count"]}, {"node_ids": loaned[:1]}]
    for profile in sorted(shipped_profiles()):
        decider = EngineDecider.named(profile)
        for k, request in enumerate(requests):
            answer = decider.reclaim(snapshot, reclaim_request_from(request), 5)
            yield {
                "case": f"examples/reclaim/{profile}/{k}",
                "profile": profile,
                "example": "reclaim",
                "request": request,
                "seed": 5,
                "answer": reclaim_json(answer),
            }


def record() -> dict[str, Any]:
    decisions = [*example_cases(), *wide_cases()]
    reclaims = list(example_reclaims())
    simulations: list[dict[str, Any]] = []
    for scenario in SCENARIOS:
        jobs = scenario_jobs(scenario)
        cluster = scenario_cluster(scenario)
        for profile in scenario_profiles(scenario):
            # The captures come from a run that asks every round (the recorder has no
            # `settles`), so they do not depend on which rounds a pipeline that settles
            # is spared; its metrics from the run the tests replay, with the bare decider.
            decider = EngineDecider.named(profile)
            recorder = Recorder(EngineDecider.named(profile), scenario.name)
            result = build_simulation(jobs, cluster, scenario_config(scenario)).run(recorder)
            if decider.settles:
                sim = build_simulation(jobs, cluster, scenario_config(scenario))
                result = sim.run(decider)
            metrics = {k: v for k, v in result.metrics.items() if k not in TIMING_KEYS}
            simulations.append({"scenario": scenario.name, "profile": profile, "metrics": metrics})
            decisions += recorder.decisions
            reclaims += recorder.reclaims[:CAPTURES_PER_RUN]
            print(
                f"{scenario.name:8s} {profile:15s} rounds {recorder.rounds:5d} "
                f"queue {metrics['avg_queue_s']:10.1f} s  jct {metrics['avg_jct_s']:10.1f} s"
            )
    return {"decisions": decisions, "reclaims": reclaims, "simulations": simulations}


def load_golden(path: Path = GOLDEN_FILE) -> dict[str, Any]:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        loaded: dict[str, Any] = json.load(handle)
    return loaded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=GOLDEN_FILE)
    args = parser.parse_args()
    golden = record()
    with gzip.GzipFile(args.out, "wb", mtime=0) as handle:
        handle.write(json.dumps(golden, sort_keys=True).encode())
    print(
        f"{len(golden['decisions'])} decisions, {len(golden['reclaims'])} reclaims, "
        f"{len(golden['simulations'])} simulations -> {args.out}"
    )


if __name__ == "__main__":
    main()
