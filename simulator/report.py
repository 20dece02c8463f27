"""The report of `arbiter simulate --out DIR`: Markdown, plots (PNG) and raw records (CSV).

Files written:

* `report.md` — what was run, a table of every profile's metrics, the plots;
* `metrics.json` — `{"results": [{"profile", <metrics>}, ...]}` as with `--json`;
* `jct_cdf.png`, `queue.png`, `utilization.png` — one curve per profile;
* `jobs-<profile>.csv` — one row per job (`simulator.metrics.RECORD_FIELDS`);
* `series-<profile>.csv` — queue length and GPUs in use at every instant that changed.

Plots use matplotlib's object API with the Agg canvas, so nothing touches
pyplot's global state or needs a display.
"""

from __future__ import annotations

import csv
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.figure import Figure

from simulator.metrics import METRIC_KEYS, RECORD_FIELDS, SimulationResult

# Every fixed metric but the job count (each row's first cells say it) and SLA
# satisfaction (empty until inference requests are replayed).
TABLE_KEYS: tuple[str, ...] = tuple(k for k in METRIC_KEYS if k not in {"jobs", "sla_satisfaction"})


def results_json(runs: Sequence[tuple[str, SimulationResult]]) -> dict[str, Any]:
    return {"results": [{"profile": name, **result.metrics} for name, result in runs]}


def fmt_count(value: float | None) -> str:
    """A count, or a mean of counts over seeds: whole, or with one decimal where it is not."""
    if value is None:
        return "–"
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def fmt(value: object) -> str:
    """A metric as a table cell: thousands separators, 3 significant decimals for small values."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 1:
            return f"{value:,.2f}"
        return f"{value:.3f}"
    return str(value)


def metrics_table(
    runs: Sequence[tuple[str, Mapping[str, Any]]], keys: Sequence[str] = TABLE_KEYS
) -> str:
    """A Markdown table, one row per profile."""
    header = "| profile | " + " | ".join(keys) + " |"
    rule = "|---|" + "---:|" * len(keys)
    rows = [f"| {name} | " + " | ".join(fmt(m.get(k)) for k in keys) + " |" for name, m in runs]
    return "\n".join([header, rule, *rows])


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name)


def _plot_jct_cdf(runs: Sequence[tuple[str, SimulationResult]], path: Path) -> None:
    figure = Figure(figsize=(7, 4.5))
    axes = figure.add_subplot()
    for name, result in runs:
        jct = np.sort([r.jct_s for r in result.jobs if r.jct_s is not None])
        if jct.size == 0:
            continue
        axes.plot(np.maximum(jct, 1.0), np.arange(1, jct.size + 1) / jct.size, label=name)
    axes.set_xscale("log")
    axes.set_xlabel("job completion time (s, log scale)")
    axes.set_ylabel("fraction of completed jobs")
    axes.set_title("JCT CDF")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _plot_series(
    runs: Sequence[tuple[str, SimulationResult]], path: Path, *, utilization: bool
) -> None:
    figure = Figure(figsize=(7, 4.5))
    axes = figure.add_subplot()
    for name, result in runs:
        series = result.series
        if not series.t:
            continue
        hours = np.asarray(series.t) / 3600.0
        if utilization:
            busy = np.asarray(series.busy_gpus, dtype=np.float64)
            cap = np.maximum(np.asarray(series.capacity_gpus, dtype=np.float64), 1.0)
            values = busy / cap
        else:
            values = np.asarray(series.waiting, dtype=np.float64)
        axes.step(hours, values, where="post", label=name, linewidth=0.8)
    axes.set_xlabel("simulated time (hours)")
    if utilization:
        axes.set_ylabel("GPUs held / GPUs open to training")
        axes.set_ylim(0, 1.05)
        axes.set_title("GPU utilisation over time")
    else:
        axes.set_ylabel("jobs waiting (pending or suspended)")
        axes.set_title("Queue length over time")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _write_jobs(result: SimulationResult, path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(RECORD_FIELDS))
        writer.writeheader()
        for record in result.jobs:
            writer.writerow(record.row())


def _write_series(result: SimulationResult, path: Path) -> None:
    series = result.series
    with path.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["t_s", "waiting", "running", "busy_gpus", "capacity_gpus"])
        writer.writerows(
            zip(
                series.t,
                series.waiting,
                series.running,
                series.busy_gpus,
                series.capacity_gpus,
                strict=True,
            )
        )


def write_report(
    out_dir: str | Path,
    runs: Sequence[tuple[str, SimulationResult]],
    context: Mapping[str, object],
) -> Path:
    """Write the report of `runs` into `out_dir`; return the Markdown file's path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "metrics.json").write_text(
        json.dumps(results_json(runs), indent=2) + "\n", encoding="utf-8"
    )
    _plot_jct_cdf(runs, out / "jct_cdf.png")
    _plot_series(runs, out / "queue.png", utilization=False)
    _plot_series(runs, out / "utilization.png", utilization=True)
    for name, result in runs:
        _write_jobs(result, out / f"jobs-{_safe(name)}.csv")
        _write_series(result, out / f"series-{_safe(name)}.csv")
    lines = ["# Simulation report", ""]
    lines += [f"- **{key}**: {value}" for key, value in context.items()]
    lines += [
        "",
        "## Metrics",
        "",
        metrics_table([(n, r.metrics) for n, r in runs]),
        "",
        "All metric keys (DESIGN §6): " + ", ".join(f"`{k}`" for k in METRIC_KEYS) + ".",
        "Full values are in `metrics.json`; per-job records in `jobs-<profile>.csv`.",
        "",
        "## Job completion times",
        "",
        "![JCT CDF](jct_cdf.png)",
        "",
        "## Queueing over time",
        "",
        "![queue length](queue.png)",
        "",
        "## Utilisation over time",
        "",
        "![GPU utilisation](utilization.png)",
        "",
    ]
    report = out / "report.md"
    report.write_text("\n".join(lines), encoding="utf-8")
    return report
