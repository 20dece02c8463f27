"""Cluster specs in the fixed JSON schema of `shared/clusters`, and the nodes they describe.

A spec lists node groups (`count` nodes of one kind each); node ids and racks
are the simulator's to derive, deterministically: node `k` of group `g` is
`g{g}-{gpu_type}-{k:04d}` on rack `g{g}-r{k // rack_size:03d}`, in group order.
The group prefix keeps ids unique when two groups share a GPU type, and keeps
racks from mixing groups (different node kinds sit on different racks).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from policies.model import Node, Pool, Topology


class ClusterSpecError(ValueError):
    """A cluster spec that does not follow the schema."""


class NodeGroup(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    count: int = Field(ge=1)
    gpus: int = Field(ge=1, le=64)
    gpu_type: str = Field(min_length=1)
    gpu_memory_gb: float = Field(gt=0)
    cpus: int = Field(ge=0)
    memory_gb: float = Field(ge=0)
    pool: Literal["training", "inference"] = "training"
    rack_size: int = Field(ge=1)
    price_per_gpu_hour: float = Field(ge=0)


class ClusterSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    description: str = ""
    sizing: str = ""
    node_groups: tuple[NodeGroup, ...] = Field(min_length=1)
    sources: tuple[str, ...] = ()

    def build_nodes(self) -> tuple[Node, ...]:
        """Every node, in group order then index order (the order placement sees)."""
        nodes: list[Node] = []
        for g, group in enumerate(self.node_groups):
            kind = group.gpu_type.lower().replace(" ", "_")
            for k in range(group.count):
                nodes.append(
                    Node(
                        id=f"g{g}-{kind}-{k:04d}",
                        gpu_type=group.gpu_type,
                        gpus=group.gpus,
                        gpu_memory_gb=group.gpu_memory_gb,
                        cpus=group.cpus,
                        memory_gb=group.memory_gb,
                        topology=Topology(rack=f"g{g}-r{k // group.rack_size:03d}"),
                        pool=Pool(group.pool),
                        price_per_gpu_hour=group.price_per_gpu_hour,
                    )
                )
        return tuple(nodes)

    def training_gpus(self) -> int:
        return sum(g.count * g.gpus for g in self.node_groups if g.pool == "training")

    def reference_gpu_type(self) -> str:
        """The training pool's most common GPU type (first listed on a tie).

        Trace durations are taken to have been recorded on it: a cluster's trace
        does not say which GPU each job ran on.
        """
        totals: dict[str, int] = {}
        for group in self.node_groups:
            if group.pool == "training":
                totals[group.gpu_type] = totals.get(group.gpu_type, 0) + group.count * group.gpus
        if not totals:
            raise ClusterSpecError(f"cluster {self.name!r} has no training nodes")
        return max(totals, key=lambda t: totals[t])

    def gpus_per_node(self, gpu_type: str) -> int:
        """The largest node size of a GPU type in the training pool."""
        sizes = [
            g.gpus for g in self.node_groups if g.gpu_type == gpu_type and g.pool == "training"
        ]
        return max(sizes) if sizes else max(g.gpus for g in self.node_groups)


def load_cluster(path: str | Path) -> ClusterSpec:
    source = Path(path)
    try:
        raw = json.loads(source.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ClusterSpecError(f"{source}: not valid JSON: {error}") from error
    return cluster_from_json(raw, str(source))


def cluster_from_json(raw: object, source: str = "cluster") -> ClusterSpec:
    """A spec from parsed JSON; a trace's description is refused with what to pass instead."""
    # A trace's own description (`shared/traces/*.cluster.json`) names its trace and has
    # no node groups; validated as a spec it would give a dozen messages about fields.
    if isinstance(raw, dict) and "trace" in raw and "node_groups" not in raw:
        trace = raw.get("trace")
        raise ClusterSpecError(
            f"{source} describes the cluster a trace was recorded on (a trace's "
            "`*.cluster.json`), not a cluster to simulate: pass a cluster spec from "
            f"shared/clusters instead (for trace {trace!r}: shared/clusters/{trace}.json; "
            "shared/clusters/README.md pairs each trace with its spec)"
        )
    try:
        return ClusterSpec.model_validate(raw)
    except ValidationError as error:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in error.errors()
        )
        raise ClusterSpecError(f"{source}: {problems}") from error
