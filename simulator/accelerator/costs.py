"""Per-layer latency, DRAM bandwidth and energy of DNNs on each dataflow style.

From `shared/perf/maestro_layer_costs.csv` (MAESTRO cost-model runs, see its README §6):
the rows of our own runs (`origin=run:*`) at 256 PEs, the size the mapping files were
written for, with unconstrained NoC and off-chip bandwidth, so `runtime_cycles` is the
layer's time when it gets all the bandwidth it asks for and
`offchip_bw_req_elems_per_cycle` is what it asks for.

Styles (the sub-accelerator kinds of the system):
- `ws`: NVDLA-/Simba-like weight-stationary (`kcp_ws`; `ckp_ws` for VGG-16, the only
  weight-stationary mapping MAESTRO accepts for it);
- `os`: ShiDianNao-like output-stationary (`yxp_os`);
- `rs`: Eyeriss-like row-stationary (`rs`).
A model runs on a style only where MAESTRO mapped it (the README lists the missing
cells), so no model runs everywhere: that is part of the heterogeneity.

Units (ours, stated in docs/relmas.md): a 1 GHz clock (`CLOCK_HZ`) and 1-byte (int8)
elements (`BYTES_PER_ELEMENT`), so 1 element/cycle is 1 GB/s. Models with a single
style in the table (Transformer, GNMT, NCF, UNet) leave no dispatch choice and are not
used.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from policies.dispatch.model import DnnLayer, DnnModel, StyleCost
from simulator.paths import perf_dir

CLOCK_HZ = 1.0e9
BYTES_PER_ELEMENT = 1
PES = "256"

STYLE_OF_DATAFLOW = {"kcp_ws": "ws", "ckp_ws": "ws", "yxp_os": "os", "rs": "rs"}
STYLES = ("ws", "os", "rs")

# The models with at least two styles in the MAESTRO runs, by size (MACs): the
# homogeneous scenarios use the small ones, the mixed ones all.
SMALL_MODELS = ("mnasnet", "MobileNetV2", "squeezenet1_0")
LARGE_MODELS = ("googlenet", "Resnet50", "ResNeXt50", "vgg16")
MODELS = SMALL_MODELS + LARGE_MODELS


@dataclass(frozen=True)
class CostTable:
    """Every usable model with its per-layer, per-style costs."""

    models: dict[str, DnnModel]

    def isolated_best_s(self, name: str, styles: frozenset[str]) -> float:
        """The model's time alone, each layer on its fastest style among `styles`."""
        total = 0.0
        for layer in self.models[name].layers:
            total += min(c.latency_s for c in layer.costs if c.style in styles)
        return total


def load_costs(path: Path | None = None) -> CostTable:
    return _load(path or perf_dir() / "maestro_layer_costs.csv")


@cache
def _load(path: Path) -> CostTable:
    layers: dict[str, dict[int, list[StyleCost]]] = {}
    with path.open(newline="") as handle:
        for row in csv.DictReader(handle):
            style = STYLE_OF_DATAFLOW.get(row["dataflow"])
            if (
                style is None
                or row["num_pes"] != PES
                or not row["origin"].startswith("run:")
                or row["model"] not in MODELS
            ):
                continue
            cycles = float(row["runtime_cycles"])
            elements = float(row["offchip_bw_req_elems_per_cycle"] or 0.0)
            cost = StyleCost(
                style=style,
                latency_s=max(cycles, 1.0) / CLOCK_HZ,
                bandwidth_gbps=elements * BYTES_PER_ELEMENT * CLOCK_HZ / 1e9,
                energy_j=float(row["energy_nj"] or 0.0) * 1e-9,
            )
            layers.setdefault(row["model"], {}).setdefault(int(row["layer_index"]), []).append(cost)
    models = {}
    for name in MODELS:
        by_index = layers[name]
        ordered = [
            DnnLayer(costs=tuple(sorted(by_index[i], key=lambda c: c.style)))
            for i in sorted(by_index)
        ]
        models[name] = DnnModel(name=name, layers=tuple(ordered))
    return CostTable(models=models)
