"""Metrics of a dispatch episode, and the table and plots that compare profiles.

Keys follow DESIGN §6 where it fixes them (`sla_satisfaction`, `decision_ms_p50`,
`decision_ms_p99`, `sim_wall_s`); the rest are ours: per-tenant satisfaction, each
sub-accelerator's utilisation (busy time over the episode's makespan), energy per
request (the cost model's per-layer energy on the style each layer ran on), latency,
and the share of time the running layers asked for more than the DRAM budget.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from simulator.accelerator.system import RunResult


def metrics(result: RunResult) -> dict[str, Any]:
    requests = result.requests
    met = [r.met for r in requests]
    tenants = sorted({r.tenant for r in requests})
    latency = [(r.finished - r.arrival) * 1000.0 for r in requests if r.finished is not None]
    span = max(result.makespan_s, 1e-12)
    utilization = {a: busy / span for a, busy in sorted(result.busy_s.items())}
    decision = result.decision_ms or [0.0]
    return {
        "requests": len(requests),
        "sla_satisfaction": float(np.mean(met)) if met else 1.0,
        "sla_by_tenant": {
            t: float(np.mean([r.met for r in requests if r.tenant == t])) for t in tenants
        },
        "utilization": utilization,
        "mean_utilization": float(np.mean(list(utilization.values()))) if utilization else 0.0,
        "energy_per_request_mj": (
            1000.0 * float(np.mean([r.energy_j for r in requests])) if requests else 0.0
        ),
        "avg_latency_ms": float(np.mean(latency)) if latency else 0.0,
        "p99_latency_ms": float(np.percentile(latency, 99)) if latency else 0.0,
        "bandwidth_saturated_share": result.saturated_s / span,
        "layer_share_by_style": {
            style: count / max(1, sum(result.layers_by_style.values()))
            for style, count in sorted(result.layers_by_style.items())
        },
        "makespan_s": result.makespan_s,
        "rounds": result.rounds,
        "fallbacks": result.fallbacks,
        "stalled": result.stalled,
        "decision_ms_p50": float(np.percentile(decision, 50)),
        "decision_ms_p99": float(np.percentile(decision, 99)),
    }


def mean_over_seeds(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Mean of each numeric metric over seeds (nested per-tenant values too)."""
    out: dict[str, Any] = {}
    for key, value in rows[0].items():
        if isinstance(value, bool) or not isinstance(value, int | float | dict):
            out[key] = value
        elif isinstance(value, dict):
            out[key] = {k: float(np.mean([r[key].get(k, 0.0) for r in rows])) for k in value}
        else:
            out[key] = float(np.mean([r[key] for r in rows]))
    out["seeds"] = len(rows)
    return out


COLUMNS = (
    ("scenario", "scenario", "{}"),
    ("profile", "profile", "{}"),
    ("SLA", "sla_satisfaction", "{:.3f}"),
    ("util", "mean_utilization", "{:.2f}"),
    ("mJ/req", "energy_per_request_mj", "{:.2f}"),
    ("lat ms", "avg_latency_ms", "{:.1f}"),
    ("BW sat", "bandwidth_saturated_share", "{:.2f}"),
    ("dec p50 ms", "decision_ms_p50", "{:.3f}"),
)


def table(rows: Sequence[Mapping[str, Any]]) -> str:
    """A Markdown table of one row per (scenario, profile), per-tenant SLA last."""
    tenants = sorted({t for r in rows for t in r.get("sla_by_tenant", {})})
    header = [c[0] for c in COLUMNS] + [f"SLA {t}" for t in tenants]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [fmt.format(row[key]) for _, key, fmt in COLUMNS]
        cells += [f"{row['sla_by_tenant'].get(t, float('nan')):.3f}" for t in tenants]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_sla_over_load(
    rows: Sequence[Mapping[str, Any]], loads: Mapping[str, float], out: Path
) -> Path:
    """SLA satisfaction against offered load, one line per profile and model mix."""
    import matplotlib  # noqa: PLC0415 - heavy; only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axes = plt.subplots(figsize=(7, 4))
    series: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for row in rows:
        mix = str(row["scenario"]).split("-", 1)[-1]
        series.setdefault((row["profile"], mix), []).append(
            (loads[row["scenario"]], row["sla_satisfaction"])
        )
    for (profile, mix), points in sorted(series.items()):
        points.sort()
        axes.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            linestyle="-" if mix == "mixed" else "--",
            label=f"{profile} ({mix})",
        )
    axes.set_xlabel("offered load ρ")
    axes.set_ylabel("SLA satisfaction")
    axes.set_ylim(0, 1.02)
    axes.legend(fontsize=7, ncol=2)
    figure.tight_layout()
    path = out / "sla_over_load.png"
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _grouped_bars(
    rows: Sequence[Mapping[str, Any]],
    value: str,
    ylabel: str,
    title: str,
    out: Path,
) -> Path:
    """One panel per scenario; in each, one group of bars per profile, one bar per key of
    the nested metric `value` (tenants, sub-accelerators)."""
    import matplotlib  # noqa: PLC0415 - heavy; only when a plot is asked for

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    scenarios_ = list(dict.fromkeys(str(r["scenario"]) for r in rows))
    keys = sorted({k for r in rows for k in r[value]})
    columns = min(3, len(scenarios_))
    lines = -(-len(scenarios_) // columns)
    figure, grid = plt.subplots(
        lines, columns, figsize=(4.2 * columns, 3.2 * lines), squeeze=False, sharey=True
    )
    width = 0.8 / max(1, len(keys))
    for index, name in enumerate(scenarios_):
        axes = grid[index // columns][index % columns]
        mine = [r for r in rows if r["scenario"] == name]
        positions = np.arange(len(mine))
        for k, key in enumerate(keys):
            axes.bar(
                positions + (k - (len(keys) - 1) / 2) * width,
                [r[value].get(key, 0.0) for r in mine],
                width,
                label=key,
            )
        axes.set_xticks(positions, [str(r["profile"]) for r in mine], rotation=45, fontsize=7)
        axes.set_title(name, fontsize=9)
        axes.set_ylim(0, 1.02)
        if index % columns == 0:
            axes.set_ylabel(ylabel)
    for index in range(len(scenarios_), lines * columns):
        grid[index // columns][index % columns].axis("off")
    grid[0][0].legend(fontsize=7, title=title, title_fontsize=7)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    plt.close(figure)
    return out


def plot_sla_by_tenant(rows: Sequence[Mapping[str, Any]], out: Path) -> Path:
    """Each tenant's SLA satisfaction, per scenario and profile."""
    return _grouped_bars(
        rows, "sla_by_tenant", "SLA satisfaction", "tenant", out / "sla_by_tenant.png"
    )


def plot_utilization(rows: Sequence[Mapping[str, Any]], out: Path) -> Path:
    """Each sub-accelerator's utilisation (busy share of the makespan), per scenario and
    profile."""
    return _grouped_bars(
        rows, "utilization", "utilisation", "sub-accelerator", out / "utilization.png"
    )


def write_plots(
    rows: Sequence[Mapping[str, Any]], loads: Mapping[str, float], out: Path
) -> dict[str, Path]:
    """The report's three plots under `out`, by caption."""
    out.mkdir(parents=True, exist_ok=True)
    return {
        "SLA satisfaction over load": plot_sla_over_load(rows, loads, out),
        "SLA satisfaction per tenant": plot_sla_by_tenant(rows, out),
        "Utilisation of each sub-accelerator": plot_utilization(rows, out),
    }
