"""The performance model: how fast a job runs on the GPUs a decision gives it.

Every constant is derived, when the model is loaded, from the measured tables
of `shared/perf` (see its README for their provenance); docs/performance-model.md
lists the derived values. A job's speed on an allocation, relative to the speed
at which it ran in the trace, is the product of independent factors:

* **speed-up with workers** — `n ** (1 + log2 e)`, where `e` is the family's
  efficiency per doubling of workers: the median over the measured points of
  `(speedup(n) / n) ** (1 / log2 n)`, on one node (Gavel `gavel_throughput.csv`,
  consolidated, 1–8 GPUs; Pollux/Sia `pollux_sia_placements.csv`, single-node
  placements), clamped to [0.5, 1];
* **GPU type** — single-GPU throughput relative to a V100, median over batch
  sizes (Gavel: K80, P100, V100; Pollux/Sia: T4, V100, A100, RTX 2080Ti, Quadro
  RTX 6000); a type the family has no measurement for runs at the speed of the
  cluster's reference type; a job spanning types runs at its slowest one;
* **locality** — a job spread over nodes runs at `1 − (1 − f)·x / x_max` of its
  single-node speed, where `x` is the share of its GPUs off its largest node
  (`x_max = 1 − 1/n`: one GPU per node) and `f` the family's median
  spread-over-packed ratio in `locality_slowdown.csv`, capped at 1;
* **parameter servers** — a PS job's speed relative to the best PS count for
  its workers, median over the eight models of `dl2_ps_worker_speed.csv`,
  by the ratio PS : workers;
* **machine variation** — each node has a speed factor drawn once per seed,
  log-normal with median 1 and the median per-job coefficient of variation of
  `pai_worker_minibatch_cov.csv`; a synchronous job runs at its slowest node's
  factor. Optionally (`PerfOptions.machine_rack_share`) part of the variance is
  shared by the nodes of a rack, as slowdowns from a rack's network, power and
  cooling are; the total spread stays the measured one;
* **restart cost** — a job restarted after a preemption or a resize makes no
  progress for `restart_overheads.json` seconds (Sia's per-model values, else
  Pollux's 30 s); the first start costs nothing (the trace's duration already
  includes it).

Co-location contention (`gavel_colocation.csv`) needs two jobs on one GPU; the
snapshot gives GPUs whole and exclusively, so it never arises here. Its median
slowdown is loaded and reported for when fractional GPUs are simulated.

Calibration: a trace job's work is its recorded duration, and its speed is
normalised by the speed of its requested GPUs packed on the cluster's reference
GPU type on a median machine, so a job run as recorded finishes in exactly its
recorded duration. `ideal` mode turns every factor off: speed is proportional
to the worker count (1 at the requested count) and restarts are free.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Literal

import numpy as np

from policies.model import Assignment, Node, Pool
from simulator.paths import perf_dir

PerfMode = Literal["measured", "ideal"]

GENERIC = "generic"
"""The family of a job whose model is unknown: linear speed-up, no locality or type effect."""

REFERENCE_TYPE = "V100"
"""Both sources measured V100s, so GPU-type speeds are expressed relative to it."""

# Family name -> (source, model name in the source's tables). Only models with
# multi-GPU measurements are families: a speed-up curve needs them (Gavel's
# Recommendation, A3C and CycleGAN were measured on one GPU only).
FAMILY_SOURCES: dict[str, tuple[str, str]] = {
    "resnet18": ("gavel", "ResNet-18"),
    "resnet50": ("gavel", "ResNet-50"),
    "transformer": ("gavel", "Transformer"),
    "lm": ("gavel", "LM"),
    "bert": ("pollux_sia", "bert"),
    "cifar10": ("pollux_sia", "cifar10"),
    "deepspeech2": ("pollux_sia", "deepspeech2"),
    "imagenet": ("pollux_sia", "imagenet"),
    "ncf": ("pollux_sia", "ncf"),
    "yolov3": ("pollux_sia", "yolov3"),
}

# Sia's restart constants are keyed by its model names; Gavel's ResNet-18 and
# ResNet-50 are the same networks and data sets as Sia's cifar10 and imagenet.
_RESTART_KEY: dict[str, str] = {"resnet18": "cifar10", "resnet50": "imagenet"}


@dataclass(frozen=True)
class FamilyPerf:
    """The derived performance constants of one model family."""

    name: str
    source: str
    gpu_speed: Mapping[str, float]
    """Single-GPU throughput relative to a V100, per GPU type measured."""
    doubling_efficiency: float
    """Speed-up per doubling of workers divided by 2 (1 = linear)."""
    spread_factor: float
    """Speed spread one GPU per node over speed packed on one node (<= 1)."""
    restart_s: float
    """Seconds without progress after a restart (preemption or resize)."""

    def speedup(self, workers: int) -> float:
        """Throughput at `workers` relative to one worker, on one node."""
        if workers <= 1:
            return float(max(workers, 0))
        exponent = 1.0 + math.log2(self.doubling_efficiency)
        return float(math.pow(workers, exponent))

    def locality(self, gpus: int, largest_on_a_node: int) -> float:
        """Speed of this spread relative to the job packed on one node."""
        if gpus <= 1 or largest_on_a_node >= gpus:
            return 1.0
        off_node = 1.0 - largest_on_a_node / gpus
        most_off = 1.0 - 1.0 / gpus
        return 1.0 - (1.0 - self.spread_factor) * off_node / most_off


@dataclass(frozen=True)
class PerfTables:
    """Everything the model reads from `shared/perf`, reduced to constants."""

    families: Mapping[str, FamilyPerf]
    machine_cov: float
    """Coefficient of variation of node speed (median per-job mean CoV on PAI)."""
    ps_efficiency: tuple[tuple[float, float], ...]
    """(PS : workers ratio, speed relative to the best PS count), ascending by ratio."""
    colocation_median: float
    """Median throughput of a job sharing its GPU with another, relative to alone."""
    restart_default_s: float
    directory: str = ""

    def family(self, name: str) -> FamilyPerf:
        found = self.families.get(name)
        if found is None:
            known = ", ".join(sorted(self.families))
            raise KeyError(f"unknown model family {name!r}; known: {known}")
        return found

    def ps_factor(self, ps: int, workers: int) -> float:
        """Speed of a PS job with `ps` servers relative to its best PS count.

        A PS job given no server at all runs as at the smallest measured ratio
        rather than stalling (no policy should do that; the engine allows it).
        """
        if workers <= 0 or not self.ps_efficiency:
            return 1.0
        ratio = ps / workers
        points = self.ps_efficiency
        if ratio <= points[0][0]:
            return points[0][1]
        for (r0, e0), (r1, e1) in itertools.pairwise(points):
            if ratio <= r1:
                # Interpolate in log-ratio: the measured grid is roughly geometric.
                t = math.log(ratio / r0) / math.log(r1 / r0)
                return e0 + t * (e1 - e0)
        return points[-1][1]


def _median(values: Iterable[float]) -> float | None:
    kept = [v for v in values if math.isfinite(v)]
    return statistics.median(kept) if kept else None


def _read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


def _efficiency(points: Iterable[tuple[int, float]]) -> float:
    """Median per-doubling efficiency of (workers, speed-up) points, clamped to [0.5, 1]."""
    per_point = [
        (speedup / n) ** (1.0 / math.log2(n)) for n, speedup in points if n >= 2 and speedup > 0
    ]
    found = _median(per_point)
    return 1.0 if found is None else min(1.0, max(0.5, found))


def _gavel_family(
    model: str, throughput: list[dict[str, str]], locality: list[dict[str, str]]
) -> tuple[dict[str, float], float, float]:
    steps: dict[tuple[str, str, int], float] = {}
    for row in throughput:
        if row["model"] != model or row["placement"] != "consolidated":
            continue
        value = float(row["steps_per_s"])
        if value > 0:  # 0 marks a configuration that could not run (out of memory)
            steps[(row["gpu_type"].upper(), row["job_type"], int(row["scale_factor"]))] = value
    job_types = sorted({jt for _, jt, _ in steps})
    gpu_speed: dict[str, float] = {}
    for gpu in sorted({g for g, _, _ in steps}):
        ratio = _median(
            steps[(gpu, jt, 1)] / steps[(REFERENCE_TYPE, jt, 1)]
            for jt in job_types
            if (gpu, jt, 1) in steps and (REFERENCE_TYPE, jt, 1) in steps
        )
        if ratio is not None:
            gpu_speed[gpu] = ratio
    points = [
        (n, value / steps[(gpu, jt, 1)])
        for (gpu, jt, n), value in steps.items()
        if n >= 2 and (gpu, jt, 1) in steps
    ]
    spread = _median(
        float(r["spread_over_packed"])
        for r in locality
        # Gavel rows are keyed by job type, e.g. "LM (batch size 10)".
        if r["source"] == "gavel" and r["model"].split(" (")[0] == model
    )
    return gpu_speed, _efficiency(points), min(1.0, spread if spread is not None else 1.0)


def _pollux_family(
    model: str, placements: list[dict[str, str]], locality: list[dict[str, str]]
) -> tuple[dict[str, float], float, float]:
    # samples/s on one GPU by (gpu type, local batch); several clusters of one
    # type (Sia's dgx and dgx-ext) are pooled by their median.
    single: dict[tuple[str, int], list[float]] = defaultdict(list)
    by_cluster_single: dict[tuple[str, str, str, int], float] = {}
    multi: list[tuple[str, str, str, int, int, float]] = []
    for row in placements:
        if row["model"] != model:
            continue
        gpus, nodes, bsz = int(row["num_gpus"]), int(row["num_nodes"]), int(row["local_bsz"])
        rate = float(row["samples_per_s"])
        if rate <= 0:
            continue
        key = (row["source"], row["cluster"], row["gpu_type"])
        if gpus == 1:
            single[(row["gpu_type"], bsz)].append(rate)
            by_cluster_single[(*key, bsz)] = rate
        elif nodes == 1:
            multi.append((*key, bsz, gpus, rate))
    gpu_speed: dict[str, float] = {}
    batches = sorted({b for _, b in single})
    for gpu in sorted({g for g, _ in single}):
        ratio = _median(
            statistics.median(single[(gpu, b)]) / statistics.median(single[(REFERENCE_TYPE, b)])
            for b in batches
            if (gpu, b) in single and (REFERENCE_TYPE, b) in single
        )
        if ratio is not None:
            gpu_speed[gpu] = ratio
    points = [
        (gpus, rate / by_cluster_single[(source, cluster, gpu, bsz)])
        for source, cluster, gpu, bsz, gpus, rate in multi
        if (source, cluster, gpu, bsz) in by_cluster_single
    ]
    spread = _median(
        float(r["spread_over_packed"])
        for r in locality
        if r["source"] in ("pollux", "sia") and r["model"] == model
    )
    return gpu_speed, _efficiency(points), min(1.0, spread if spread is not None else 1.0)


def _ps_efficiency(rows: list[dict[str, str]]) -> tuple[tuple[float, float], ...]:
    speed: dict[tuple[str, int], dict[int, float]] = defaultdict(dict)
    for row in rows:
        speed[(row["model"], int(row["num_workers"]))][int(row["num_ps"])] = float(
            row["speed_total"]
        )
    grid = (0.125, 0.25, 0.5, 1.0, 2.0, 4.0)
    buckets: dict[float, list[float]] = defaultdict(list)
    for (_, workers), by_ps in speed.items():
        best = max(by_ps.values())
        if best <= 0:
            continue
        for ps, value in by_ps.items():
            ratio = ps / workers
            nearest = min(grid, key=lambda g: abs(math.log(ratio / g)))
            buckets[nearest].append(value / best)
    points: list[tuple[float, float]] = []
    running_max = 0.0
    for ratio in grid:
        found = _median(buckets.get(ratio, []))
        if found is None:
            continue
        # More servers never make a job slower in this model: the measured dips
        # are noise of single runs, so keep the curve non-decreasing.
        running_max = max(running_max, found)
        points.append((ratio, running_max))
    return tuple(points)


@lru_cache(maxsize=4)
def load_perf_tables(directory: str | None = None) -> PerfTables:
    """Derive the model's constants from the tables in `directory` (default: shared/perf)."""
    base = Path(directory) if directory else perf_dir()
    throughput = _read_csv(base / "gavel_throughput.csv")
    locality = _read_csv(base / "locality_slowdown.csv")
    placements = _read_csv(base / "pollux_sia_placements.csv")
    restart = json.loads((base / "restart_overheads.json").read_text(encoding="utf-8"))
    sia_restart: dict[str, float] = {k: float(v) for k, v in restart["sia_per_model"].items()}
    default_restart = float(restart["pollux_all_models"])
    families: dict[str, FamilyPerf] = {}
    for name, (source, model) in FAMILY_SOURCES.items():
        if source == "gavel":
            speed, efficiency, spread = _gavel_family(model, throughput, locality)
            where = "Gavel gavel_throughput.csv / locality_slowdown.csv"
        else:
            speed, efficiency, spread = _pollux_family(model, placements, locality)
            where = "Pollux/Sia pollux_sia_placements.csv / locality_slowdown.csv"
        key = _RESTART_KEY.get(name, name)
        families[name] = FamilyPerf(
            name=name,
            source=f"{where} ({model})",
            gpu_speed=speed,
            doubling_efficiency=efficiency,
            spread_factor=spread,
            restart_s=sia_restart.get(key, sia_restart.get("default", default_restart)),
        )
    families[GENERIC] = FamilyPerf(
        name=GENERIC,
        source="no model information: linear speed-up, Pollux's 30 s restart",
        gpu_speed={},
        doubling_efficiency=1.0,
        spread_factor=1.0,
        restart_s=default_restart,
    )
    cov = _median(float(r["cov_mean"]) for r in _read_csv(base / "pai_worker_minibatch_cov.csv"))
    colocation = _median(
        float(r["normalized_a"])
        for r in _read_csv(base / "gavel_colocation.csv")
        if float(r["steps_per_s_a"]) > 0 and float(r["isolated_steps_per_s_a"]) > 0
    )
    return PerfTables(
        families=families,
        machine_cov=cov if cov is not None else 0.0,
        ps_efficiency=_ps_efficiency(_read_csv(base / "dl2_ps_worker_speed.csv")),
        colocation_median=colocation if colocation is not None else 1.0,
        restart_default_s=default_restart,
        directory=str(base),
    )


@dataclass(frozen=True)
class PerfOptions:
    """Which effects of the model are on. `ideal` turns all of them off."""

    mode: PerfMode = "measured"
    speedup: bool = True
    gpu_types: bool = True
    locality: bool = True
    parameter_servers: bool = True
    machine_variation: bool = True
    machine_rack_share: float = 0.0
    """Share of the log-variance of node speed that nodes of one rack (or switch) have in
    common; the rest is each node's own. 0 (the default): nodes vary independently."""
    restarts: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.machine_rack_share <= 1.0:
            raise ValueError(
                f"machine_rack_share must be in [0, 1], got {self.machine_rack_share!r}"
            )

    @classmethod
    def for_mode(cls, mode: PerfMode) -> PerfOptions:
        if mode == "ideal":
            return cls(
                mode="ideal",
                speedup=False,
                gpu_types=False,
                locality=False,
                parameter_servers=False,
                machine_variation=False,
                restarts=False,
            )
        return cls(mode="measured")


@dataclass(frozen=True)
class JobShape:
    """What the model needs to know about a job: its family and its recorded request."""

    family: str
    gpus_per_worker: int
    workers: int
    ps: int = 0


def machine_factors(
    nodes: Sequence[Node], cov: float, rack_share: float, seed: int
) -> dict[str, float]:
    """Each node's speed factor: log-normal, median 1, coefficient of variation `cov`.

    The log-factor is the sum of a component shared by the node's rack (or switch;
    `Node.topology.rack`, a node with none is a rack of its own) and the node's own,
    with variances `rack_share·σ²` and `(1 − rack_share)·σ²`, `σ² = log(1 + cov²)`:
    the spread over all nodes is the measured one whatever the split. Real slowdowns
    are shared by machines of one rack (its network, power and cooling) or one batch of
    hardware, which is what lets a scheduler learn an unseen machine from its
    neighbours. The nodes' own draws are the same stream for every split, so
    `rack_share = 0` gives exactly the independent factors of earlier versions.
    """
    # Log-normal with median 1: a typical machine runs the trace's speed.
    sigma = math.sqrt(math.log1p(cov**2))
    own = math.sqrt(1.0 - rack_share) * sigma
    shared = math.sqrt(rack_share) * sigma
    rng = np.random.default_rng([seed, 0x5EED])
    draws = rng.standard_normal(len(nodes))
    rack_of = {n.id: n.topology.rack or f"node:{n.id}" for n in nodes}
    rack_draw: dict[str, float] = {}
    if rack_share > 0:
        racks = list(dict.fromkeys(rack_of[n.id] for n in nodes))
        rack_rng = np.random.default_rng([seed, 0x5EED, 0x7AC])
        rack_draw = dict(
            zip(racks, (float(z) for z in rack_rng.standard_normal(len(racks))), strict=True)
        )
    factors: dict[str, float] = {}
    for node, z in zip(nodes, draws, strict=True):
        log_factor = own * float(z)
        if rack_share > 0:
            log_factor += shared * rack_draw[rack_of[node.id]]
        factors[node.id] = math.exp(log_factor)
    return factors


@dataclass
class ClusterPerf:
    """The model bound to one cluster and seed: node speeds, reference type, calibrations."""

    tables: PerfTables
    options: PerfOptions
    nodes: Sequence[Node]
    reference_type: str
    reference_node_gpus: int
    seed: int = 0
    node_type: dict[str, str] = field(init=False)
    node_gpus: dict[str, int] = field(init=False)
    node_factor: dict[str, float] = field(init=False)
    _calibration: dict[JobShape, float] = field(init=False, default_factory=dict)

    def __post_init__(self) -> None:
        self.node_type = {n.id: n.gpu_type for n in self.nodes}
        self.node_gpus = {n.id: n.gpus for n in self.nodes}
        self.node_factor = {n.id: 1.0 for n in self.nodes}
        if self.options.machine_variation and self.tables.machine_cov > 0:
            self.node_factor = machine_factors(
                self.nodes, self.tables.machine_cov, self.options.machine_rack_share, self.seed
            )

    def family(self, name: str) -> FamilyPerf:
        return self.tables.family(name)

    def type_speed(self, family: FamilyPerf, gpu_type: str) -> float:
        """Speed on `gpu_type` relative to the reference type (1 when either is unmeasured)."""
        if not self.options.gpu_types:
            return 1.0
        here = family.gpu_speed.get(gpu_type)
        there = family.gpu_speed.get(self.reference_type)
        if here is None or there is None:
            return 1.0
        return here / there

    def restart_s(self, family: str) -> float:
        return self.tables.family(family).restart_s if self.options.restarts else 0.0

    def _absolute(
        self,
        family: FamilyPerf,
        *,
        gpus_per_worker: int,
        workers: int,
        ps: int,
        ps_job: bool,
        largest_on_a_node: int,
        slowest_type: float,
        slowest_node: float,
    ) -> float:
        speed = family.speedup(workers) if self.options.speedup else float(workers)
        if self.options.locality:
            speed *= family.locality(workers * gpus_per_worker, largest_on_a_node)
        if self.options.parameter_servers and ps_job:
            speed *= self.tables.ps_factor(ps, workers)
        return speed * slowest_type * slowest_node

    def calibration(self, shape: JobShape) -> float:
        """Absolute speed of the job as recorded: requested GPUs packed on the reference type."""
        found = self._calibration.get(shape)
        if found is None:
            gpus = shape.workers * shape.gpus_per_worker
            per_node = max(
                shape.gpus_per_worker,
                self.reference_node_gpus - self.reference_node_gpus % shape.gpus_per_worker,
            )
            found = self._absolute(
                self.tables.family(shape.family),
                gpus_per_worker=shape.gpus_per_worker,
                workers=shape.workers,
                ps=shape.ps,
                ps_job=shape.ps > 0,
                largest_on_a_node=min(gpus, per_node),
                slowest_type=1.0,
                slowest_node=1.0,
            )
            self._calibration[shape] = found
        return found

    def rate(self, shape: JobShape, placement: Sequence[Assignment], ps: int) -> float:
        """Work per second on `placement` (1.0 = the speed the trace recorded)."""
        gpus = sum(len(a.gpu_indices) for a in placement)
        workers = gpus // shape.gpus_per_worker
        if workers <= 0:
            return 0.0
        family = self.tables.family(shape.family)
        largest = max(len(a.gpu_indices) for a in placement)
        slowest_type = min(self.type_speed(family, self.node_type[a.node_id]) for a in placement)
        slowest_node = min(self.node_factor[a.node_id] for a in placement)
        speed = self._absolute(
            family,
            gpus_per_worker=shape.gpus_per_worker,
            workers=workers,
            ps=ps,
            ps_job=shape.ps > 0,
            largest_on_a_node=largest,
            slowest_type=slowest_type,
            slowest_node=slowest_node,
        )
        return speed / self.calibration(shape)

    def fastest_rate(self, shape: JobShape, min_workers: int, max_workers: int) -> float:
        """The most work per second (1.0 = the recorded speed) that any allocation of
        `min_workers` to `max_workers` workers could give the job on this cluster (0 when
        not even the minimum fits in all its GPUs): every factor at
        its best at once (the fastest GPU type and the fastest machine of the cluster,
        as many GPUs on one node as its largest node holds, the best measured ratio of
        parameter servers). No real allocation beats it, so work over it is a floor on
        the job's run time that no policy can go below (:mod:`simulator.bounds`)."""
        family = self.tables.family(shape.family)
        gpw = shape.gpus_per_worker
        total = sum(self.node_gpus.values())
        largest = max(self.node_gpus.values(), default=0)
        on_a_node = largest - largest % gpw
        types = set(self.node_type.values())
        best_type = max((self.type_speed(family, t) for t in types), default=1.0)
        best_node = max(self.node_factor.values(), default=1.0)
        ps_best = max((e for _, e in self.tables.ps_efficiency), default=1.0)
        fastest = 0.0
        for workers in range(max(min_workers, 1), max_workers + 1):
            gpus = workers * gpw
            if gpus > total:
                break
            speed = self._absolute(
                family,
                gpus_per_worker=gpw,
                workers=workers,
                ps=0,
                ps_job=False,
                largest_on_a_node=min(gpus, on_a_node),
                slowest_type=best_type,
                slowest_node=best_node,
            )
            fastest = max(fastest, speed)
        if self.options.parameter_servers and shape.ps > 0:
            fastest *= ps_best
        return fastest / self.calibration(shape)

    def speedup_hints(self, shape: JobShape, counts: Iterable[int]) -> dict[int, float]:
        """Speed at each worker count relative to one worker (packed), for scaling policies."""
        family = self.tables.family(shape.family)
        if not self.options.speedup:
            return {}
        return {n: family.speedup(n) for n in counts}

    def gpu_type_hints(self, shape: JobShape, gpu_types: Iterable[str]) -> dict[str, float]:
        family = self.tables.family(shape.family)
        return {t: self.type_speed(family, t) for t in gpu_types}


def bind_cluster(
    tables: PerfTables,
    options: PerfOptions,
    nodes: Sequence[Node],
    reference_type: str,
    seed: int,
) -> ClusterPerf:
    training = [n for n in nodes if n.pool is Pool.TRAINING and n.gpu_type == reference_type]
    per_node = max((n.gpus for n in training), default=max(n.gpus for n in nodes))
    return ClusterPerf(
        tables=tables,
        options=options,
        nodes=nodes,
        reference_type=reference_type,
        reference_node_gpus=per_node,
        seed=seed,
    )


def constants_markdown(tables: PerfTables | None = None) -> str:
    """The derived constants as Markdown (docs/performance-model.md quotes this output)."""
    t = tables or load_perf_tables()
    gpu_types = sorted({g for f in t.families.values() for g in f.gpu_speed})
    header = (
        "| family | source | e (per doubling) | speed-up at 2 / 8 / 32 | spread factor f "
        "| restart (s) | " + " | ".join(gpu_types) + " |"
    )
    rule = "|---|---|---:|---|---:|---:|" + "---:|" * len(gpu_types)
    rows = []
    for family in t.families.values():
        speeds = " | ".join(
            f"{family.gpu_speed[g]:.3g}" if g in family.gpu_speed else "–" for g in gpu_types
        )
        curve = " / ".join(f"{family.speedup(n):.2f}" for n in (2, 8, 32))
        rows.append(
            f"| {family.name} | {family.source} | {family.doubling_efficiency:.3f} | {curve} "
            f"| {family.spread_factor:.3f} | {family.restart_s:g} | {speeds} |"
        )
    ps = ", ".join(f"{r:g}: {e:.3f}" for r, e in t.ps_efficiency)
    return "\n".join(
        [
            header,
            rule,
            *rows,
            "",
            f"- machine variation: coefficient of variation {t.machine_cov:.4f}",
            f"- parameter servers (PS : workers ratio: relative speed): {ps}",
            f"- co-location (inactive): median normalized throughput {t.colocation_median:.3f}",
            f"- default restart: {t.restart_default_s:g} s",
        ]
    )
