"""Benchmark a running Arbiter service: decision latency and throughput per profile.

Posts `examples/small.json` and `examples/large.json` (DESIGN §8: about 14 KB and
550 KB) to `POST /v1/decisions` under each profile, from `--concurrency` client
threads for `--duration-s` seconds per (profile, snapshot) cell, and prints a Markdown
table of p50 / p99 latency and decisions per second (`--json PATH` also writes the
figures as JSON; `-` writes them to stdout instead of the table).

The client is kept cheap so that it does not dominate what it measures: every request
body is serialised once with orjson before the clock starts, each thread reuses one
keep-alive connection, and responses are not decoded beyond their status. It still
shares the machine with the server when both run on one host, which the figures
include. Only loopback URLs are accepted: this is a local measurement tool, not a load
generator for shared services.

Usage: `python -m evidence.bench --url http://127.0.0.1:8000 --profiles fifo,tiresias`
(see `scripts/serve_and_bench.sh` to start a service on embedded defaults first).
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import itertools
import json
import math
import os
import platform
import sys
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import orjson

from evidence.runner import EXAMPLES, percentile

SIZES = ("small", "large")
WARMUP_REQUESTS = 3


@dataclass(frozen=True)
class Load:
    """How hard and how long to push each cell."""

    url: str
    duration_s: float
    concurrency: int
    max_requests: int
    timeout_s: float


@dataclass
class CellResult:
    """Figures of one (profile, snapshot) cell."""

    profile: str
    snapshot: str
    body_bytes: int
    requests: int = 0
    errors: int = 0
    elapsed_s: float = 0.0
    p50_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    decisions_per_s: float = 0.0
    server_p50_ms: float | None = None  # upper bounds, from the service's own histogram
    server_p99_ms: float | None = None
    error: str | None = None  # why the cell was skipped, if it was
    statuses: dict[str, int] = field(default_factory=dict)


def is_loopback(url: str) -> bool:
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def fetch_profiles(client: httpx.Client) -> list[str]:
    response = client.get("/v1/profiles")
    response.raise_for_status()
    listed = response.json()
    if not isinstance(listed, list):
        raise SystemExit(f"GET /v1/profiles returned {type(listed).__name__}, expected a list")
    return [str(item["name"]) for item in listed if isinstance(item, dict) and "name" in item]


def decision_histogram(client: httpx.Client, profile: str) -> dict[float, float]:
    """Cumulative counts by upper bound (s) of the service's `arbiter_decision_seconds`."""
    counts: dict[float, float] = {}
    for line in client.get("/metrics").text.splitlines():
        if (
            not line.startswith("arbiter_decision_seconds_bucket{")
            or f'profile="{profile}"' not in line
        ):
            continue
        labels, value = line.rsplit(" ", 1)
        bound = labels.split('le="', 1)[1].split('"', 1)[0]
        counts[math.inf if bound == "+Inf" else float(bound)] = float(value)
    return counts


def histogram_quantile(
    before: dict[float, float], after: dict[float, float], q: float
) -> float | None:
    """Upper bound (s) of the bucket holding the q-quantile of what was added in between."""
    added = sorted((bound, after[bound] - before.get(bound, 0.0)) for bound in after)
    if not added or added[-1][1] <= 0:
        return None
    total = added[-1][1]
    return next(bound for bound, count in added if count >= q * total)


def run_cell(load: Load, profile: str, size: str, body: bytes) -> CellResult:
    """Post `body` from `concurrency` threads until the time or the request budget runs out."""
    result = CellResult(profile=profile, snapshot=size, body_bytes=len(body))
    headers = {"content-type": "application/json"}
    with httpx.Client(base_url=load.url, timeout=load.timeout_s) as probe:
        for _ in range(WARMUP_REQUESTS):
            response = probe.post("/v1/decisions", content=body, headers=headers)
            if response.status_code != 200:
                result.error = f"HTTP {response.status_code}: {response.text[:200]}"
                return result

    budget = itertools.count()  # next() on a count is atomic under the GIL
    lock = threading.Lock()
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    deadline = time.perf_counter() + load.duration_s

    def worker() -> None:
        mine: list[float] = []
        my_statuses: dict[str, int] = {}
        with httpx.Client(base_url=load.url, timeout=load.timeout_s) as client:
            while time.perf_counter() < deadline and next(budget) < load.max_requests:
                started = time.perf_counter()
                try:
                    status = str(
                        client.post("/v1/decisions", content=body, headers=headers).status_code
                    )
                except httpx.HTTPError as error:
                    status = type(error).__name__
                took = time.perf_counter() - started
                my_statuses[status] = my_statuses.get(status, 0) + 1
                if status == "200":
                    mine.append(took)
        with lock:
            latencies.extend(mine)
            for status, count in my_statuses.items():
                statuses[status] = statuses.get(status, 0) + count

    with httpx.Client(base_url=load.url, timeout=load.timeout_s) as probe:
        histogram_before = decision_histogram(probe, profile)
    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=load.concurrency) as pool:
        for future in [pool.submit(worker) for _ in range(load.concurrency)]:
            future.result()
    result.elapsed_s = time.perf_counter() - started
    result.statuses = dict(sorted(statuses.items()))
    result.requests = sum(statuses.values())
    result.errors = result.requests - len(latencies)
    if latencies:
        latencies.sort()
        result.p50_ms = percentile(latencies, 0.50) * 1000
        result.p99_ms = percentile(latencies, 0.99) * 1000
        result.mean_ms = sum(latencies) / len(latencies) * 1000
        result.decisions_per_s = len(latencies) / result.elapsed_s
    # The service's own latency (decode, decide, encode), from its histogram: bucket bounds.
    with httpx.Client(base_url=load.url, timeout=load.timeout_s) as probe:
        histogram_after = decision_histogram(probe, profile)
    for q, name in ((0.50, "server_p50_ms"), (0.99, "server_p99_ms")):
        bound = histogram_quantile(histogram_before, histogram_after, q)
        if bound is not None:
            setattr(result, name, bound * 1000)
    return result


def markdown_table(results: Sequence[CellResult]) -> str:
    def ms(value: float | None) -> str:
        return "–" if value is None else f"{value:.1f}"

    lines = [
        "| profile | snapshot | requests | errors | p50 ms | p99 ms | decisions/s "
        "| service p50 ≤ ms | service p99 ≤ ms |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        if r.error is not None:
            lines.append(
                f"| {r.profile} | {r.snapshot} | – | – | – | – | skipped: {r.error} | – | – |"
            )
            continue
        lines.append(
            f"| {r.profile} | {r.snapshot} | {r.requests} | {r.errors} | {ms(r.p50_ms)} "
            f"| {ms(r.p99_ms)} | {r.decisions_per_s:.1f} | {ms(r.server_p50_ms)} "
            f"| {ms(r.server_p99_ms)} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="Benchmark POST /v1/decisions of a service.")
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="service base URL")
    parser.add_argument(
        "--profiles", default="", help="comma-separated profiles (default: all of /v1/profiles)"
    )
    parser.add_argument(
        "--sizes", default=",".join(SIZES), help="comma-separated example snapshots to post"
    )
    parser.add_argument("--examples", type=Path, default=EXAMPLES, help="examples directory")
    parser.add_argument("--duration-s", type=float, default=5.0, help="seconds per cell")
    parser.add_argument("--concurrency", type=int, default=1, help="client threads")
    parser.add_argument(
        "--max-requests", type=int, default=20_000, help="requests per cell at most"
    )
    parser.add_argument("--timeout-s", type=float, default=30.0, help="per-request timeout")
    parser.add_argument(
        "--json", dest="json_path", help="also write the figures as JSON ('-': stdout)"
    )
    args = parser.parse_args(argv)
    if not 0 < args.duration_s <= 600:
        parser.error("--duration-s must be in (0, 600]")
    if not 1 <= args.concurrency <= 64:
        parser.error("--concurrency must be in [1, 64]")
    if args.max_requests < 1:
        parser.error("--max-requests must be positive")
    if not is_loopback(args.url):
        parser.error(f"--url must be a loopback address, not {args.url!r}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    url: str = args.url.rstrip("/")
    try:
        with httpx.Client(base_url=url, timeout=args.timeout_s) as client:
            profiles = [p for p in args.profiles.split(",") if p] or fetch_profiles(client)
    except httpx.HTTPError as error:
        print(f"cannot list the profiles of {url}: {error}", file=sys.stderr)
        return 2
    sizes = [s for s in args.sizes.split(",") if s]
    snapshots = {s: orjson.loads((args.examples / f"{s}.json").read_bytes()) for s in sizes}

    load = Load(url, args.duration_s, args.concurrency, args.max_requests, args.timeout_s)
    results: list[CellResult] = []
    for profile in profiles:
        for size in sizes:
            body = orjson.dumps({"profile": profile, "snapshot": snapshots[size]})
            cell = run_cell(load, profile, size, body)
            results.append(cell)
            print(f"{profile}/{size}: {cell.requests} requests", file=sys.stderr)

    report = {
        "url": url,
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
        },
        "concurrency": args.concurrency,
        "duration_s": args.duration_s,
        "results": [asdict(r) for r in results],
    }
    if args.json_path == "-":
        print(json.dumps(report, indent=2))
    else:
        print(markdown_table(results))
        if args.json_path:
            Path(args.json_path).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 1 if any(r.error or r.errors for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
