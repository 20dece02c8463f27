"""Trace-driven, event-driven simulator of a GPU cluster around the Arbiter engine (DESIGN §6).

Modules: :mod:`~simulator.traces` (the common CSV schema), :mod:`~simulator.cluster`
(cluster specs), :mod:`~simulator.workload` (fields traces lack),
:mod:`~simulator.perf` (the performance model, from `shared/perf`),
:mod:`~simulator.core` (events, snapshots, decisions; the stepping API),
:mod:`~simulator.deciders` (engine in process or over HTTP),
:mod:`~simulator.metrics`, :mod:`~simulator.report`, :mod:`~simulator.cli`.
It imports only :mod:`policies`; see docs/simulator.md.
"""
