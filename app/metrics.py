"""Prometheus metrics of one app instance (its own registry, nothing global)."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.decisions = Counter(
            "arbiter_decisions_total",
            "Decisions answered, by profile and endpoint.",
            ["profile", "endpoint"],
            registry=self.registry,
        )
        self.decision_seconds = Histogram(
            "arbiter_decision_seconds",
            "Time to decide (validation, policies, encoding), by profile.",
            ["profile"],
            buckets=(
                0.0005,
                0.001,
                0.002,
                0.003,
                0.005,
                0.0075,
                0.01,
                0.015,
                0.02,
                0.03,
                0.05,
                0.075,
                0.1,
                0.2,
                0.3,
                0.5,
                1.0,
                2.0,
            ),
            registry=self.registry,
        )
        self.fallbacks = Counter(
            "arbiter_fallbacks_total",
            "Decisions answered by a fallback heuristic.",
            ["profile"],
            registry=self.registry,
        )
        self.errors = Counter(
            "arbiter_errors_total", "Error responses, by code.", ["code"], registry=self.registry
        )
        self.feedback = Counter(
            "arbiter_feedback_events_total",
            "Feedback events accepted, by kind.",
            ["kind"],
            registry=self.registry,
        )
        self._decided: dict[tuple[str, str], tuple[Counter, Histogram]] = {}

    def decided(self, profile: str, endpoint: str, seconds: float, *, fell_back: bool) -> None:
        """Count a decision answered, by profile and endpoint, with the time it took and
        whether a fallback heuristic answered it.

        The labelled series are kept per (profile, endpoint): `labels` takes a lock and
        builds its key on every call, which cost more than the counting itself on every
        small request. Only answered decisions get here, so the profiles are known ones.
        """
        series = self._decided.get((profile, endpoint))
        if series is None:
            series = (
                self.decisions.labels(profile, endpoint),
                self.decision_seconds.labels(profile),
            )
            self._decided[(profile, endpoint)] = series
        counted, timed = series
        counted.inc()
        timed.observe(seconds)
        if fell_back:
            self.fallbacks.labels(profile).inc()

    def watch_log(self, stats: Callable[[], Mapping[str, object]]) -> None:
        """Expose the decision log's counters as gauges read at scrape time."""
        for key, help_text in (
            ("buffered", "Log records held in memory, not yet written."),
            ("buffered_bytes", "About how many bytes the log records in memory hold."),
            ("spill_pending", "Log records spilled to local files, not yet written."),
            ("written", "Log records written to the database (total)."),
            ("rejected", "Log records the database refused, set aside in files (total)."),
            ("failures", "Failed attempts to write the log (total)."),
            ("stalled_s", "Seconds with records waiting and none written or set aside."),
        ):
            gauge = Gauge(f"arbiter_log_{key}", help_text, registry=self.registry)
            gauge.set_function(_reader(stats, key))


def _reader(stats: Callable[[], Mapping[str, object]], key: str) -> Callable[[], float]:
    def read() -> float:
        value = stats().get(key, 0)
        return float(value) if isinstance(value, int | float) else 0.0

    return read
