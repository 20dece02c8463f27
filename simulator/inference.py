"""Inference-pool demand over time, for clusters with an `inference` pool.

The series is `shared/perf/inference_sd_lora_5min.csv` (Alibaba GenTD26,
Stable-Diffusion + LoRA serving, 23 days in 5-minute bins): `mean_busy_gpus`
per bin, with a strong daily cycle. It is scaled to the simulated pool as that
README suggests: servers needed = ceil(scale × busy / GPUs per server), with
`scale` chosen so that the series' `peak_quantile` (default the 99th
percentile of its bins) needs the whole pool, and looped when the simulation
outlasts it. `busy` is the maximum of `mean_busy_gpus` over the last
`smoothing_bins` bins (default 12: an hour), because a pool is provisioned for
the peak of the recent past rather than re-sized every five minutes (58 % of
the 5-minute bins are empty). `offset_s` says which point of the series is the
simulation's time 0; by default day 5, since the first four days are nearly
idle (daily means of 0.01–0.03 busy GPUs against 0.2–1.0 afterwards: the
service was ramping up).

The simulator puts `servers_needed` and a forecast (the next bins, nearest
first) in every snapshot. With `loan_idle` on it lends the pool's idle servers
to training (`loaned` nodes) and takes them back when demand rises (DESIGN §2,
reclaim); off by default.
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from simulator.paths import perf_dir

DEFAULT_SERIES = "inference_sd_lora_5min.csv"


@dataclass(frozen=True)
class InferenceOptions:
    series: str | None = None
    """CSV with `time_s` and `mean_busy_gpus` columns; default: the SD-LoRA series."""
    loan_idle: bool = False
    peak_quantile: float = 0.99
    offset_s: float = 4 * 86400.0
    smoothing_bins: int = 12
    forecast_bins: int = 12


@dataclass(frozen=True)
class InferenceSeries:
    step_s: float
    busy_gpus: tuple[float, ...]


def load_series(path: str | Path | None = None) -> InferenceSeries:
    source = Path(path) if path else perf_dir() / DEFAULT_SERIES
    with source.open(encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle))
    if len(rows) < 2:
        raise ValueError(f"{source}: an inference series needs at least two bins")
    times = [float(r["time_s"]) for r in rows]
    return InferenceSeries(
        step_s=times[1] - times[0], busy_gpus=tuple(float(r["mean_busy_gpus"]) for r in rows)
    )


class InferenceDemand:
    """Servers the inference pool needs at any simulated time."""

    def __init__(
        self,
        series: InferenceSeries,
        pool_servers: int,
        gpus_per_server: int,
        options: InferenceOptions,
    ) -> None:
        self.series = series
        self.pool_servers = pool_servers
        self.options = options
        busy = np.asarray(series.busy_gpus, dtype=np.float64)
        peak = float(np.quantile(busy, options.peak_quantile)) or float(busy.max()) or 1.0
        scale = pool_servers * gpus_per_server / peak
        window = max(1, options.smoothing_bins)
        # Trailing maximum, wrapping around: the series is looped.
        padded = np.concatenate([busy[len(busy) - window + 1 :], busy]) if window > 1 else busy
        recent = np.lib.stride_tricks.sliding_window_view(padded, window).max(axis=1)
        self.needed = tuple(
            min(pool_servers, math.ceil(scale * float(b) / gpus_per_server - 1e-9)) for b in recent
        )

    def bin_at(self, t: float) -> int:
        return math.floor((t + self.options.offset_s) / self.series.step_s)

    def needed_in_bin(self, k: int) -> int:
        return self.needed[k % len(self.needed)]

    def servers_needed(self, t: float) -> int:
        return self.needed_in_bin(self.bin_at(t))

    def forecast(self, t: float) -> tuple[int, ...]:
        k = self.bin_at(t)
        return tuple(self.needed_in_bin(k + i) for i in range(1, self.options.forecast_bins + 1))

    def next_change(self, t: float) -> float | None:
        """The next time after `t` at which the servers needed change (None: never)."""
        k = self.bin_at(t)
        now = self.needed_in_bin(k)
        for i in range(1, len(self.needed) + 1):
            if self.needed_in_bin(k + i) != now:
                return (k + i) * self.series.step_s - self.options.offset_s
        return None
