"""What a dispatch asks and answers: DNN inference requests onto sub-accelerators.

Dispatch is its own decision type (DESIGN §2, §4), after RELMAS (Blanco et al., DAC
2024): a heterogeneous multi-accelerator system, whose sub-accelerators have different
dataflow styles and share one DRAM bandwidth budget, serves the inference requests of
many tenants layer by layer. Each round the caller sends the system as it is (what
every sub-accelerator runs, the bandwidth budget, the cost of every layer on every
style) and the pending requests; the answer says, for every request, which idle
sub-accelerator starts its next layer and in which order, or why it waits, and which
requests can no longer meet their deadline.

Times are seconds on the caller's clock, as in the cluster snapshot; bandwidth is GB/s.
Type-level checks live on the fields; cross-field checks are in
:func:`dispatch_problems`, which reports every problem with its JSON path.
"""

from __future__ import annotations

import math
from enum import StrEnum
from functools import cached_property
from typing import Annotated

from msgspec import Meta, field

from policies.decision import Fallback, PolicyRef
from policies.model import Frozen, NonEmpty, Problem

Seconds = Annotated[float, Meta(ge=0, description="Seconds on the caller's clock.")]


class StyleCost(Frozen, frozen=True, kw_only=True):
    """What one layer costs on a sub-accelerator of one dataflow style, running alone."""

    style: Annotated[NonEmpty, Meta(description="Dataflow style, e.g. `kcp_ws`, `yxp_os`, `rs`.")]
    latency_s: Annotated[
        float, Meta(gt=0, description="Seconds the layer takes alone, at full bandwidth.")
    ]
    bandwidth_gbps: Annotated[
        float, Meta(ge=0, description="DRAM bandwidth (GB/s) the layer needs to run at that speed.")
    ]
    energy_j: Annotated[float, Meta(ge=0, description="Energy of the layer (joules).")] = 0.0


class DnnLayer(Frozen, frozen=True, kw_only=True, dict=True, gc=True):
    costs: Annotated[
        tuple[StyleCost, ...],
        Meta(
            min_length=1,
            description="Cost on every style that can run it; other styles cannot.",
        ),
    ]

    @cached_property
    def by_style(self) -> dict[str, StyleCost]:
        return {c.style: c for c in self.costs}


class DnnModel(Frozen, frozen=True, kw_only=True):
    name: NonEmpty
    layers: Annotated[tuple[DnnLayer, ...], Meta(min_length=1, description="In execution order.")]


class RunningLayer(Frozen, frozen=True, kw_only=True):
    """The layer a sub-accelerator is running now."""

    request_id: NonEmpty
    layer: Annotated[int, Meta(ge=0, description="Index of the layer in its model.")]
    remaining_s: Annotated[
        float,
        Meta(ge=0, description="Seconds of work left, at full bandwidth (the caller's estimate)."),
    ]


class SubAccelerator(Frozen, frozen=True, kw_only=True):
    id: NonEmpty
    style: Annotated[NonEmpty, Meta(description="Dataflow style; names `StyleCost.style`.")]
    running: Annotated[
        RunningLayer | None, Meta(description="What it runs now; null when idle.")
    ] = None
    online: Annotated[bool, Meta(description="False: takes no new layer.")] = True


class DispatchTenant(Frozen, frozen=True, kw_only=True):
    id: NonEmpty
    priority: Annotated[
        float, Meta(gt=0, le=1000, description="Weight of the tenant's requests (PREMA tokens).")
    ] = 1.0


class PendingInference(Frozen, frozen=True, kw_only=True):
    id: NonEmpty
    model: Annotated[NonEmpty, Meta(description="Name of one of the snapshot's `models`.")]
    tenant: NonEmpty = "default"
    next_layer: Annotated[
        int,
        Meta(
            ge=0,
            description="Index of the next layer to run (= layers done); in flight if running.",
        ),
    ] = 0
    arrival: Seconds
    deadline: Annotated[float, Meta(ge=0, description="Seconds; the SLA: finish by then.")]


class DispatchSnapshot(Frozen, frozen=True, kw_only=True, dict=True, gc=True):
    """The accelerator system and its pending requests at one instant."""

    system_id: Annotated[
        str, Meta(min_length=1, max_length=255, description="The system this snapshot describes.")
    ] = "default"
    now: Seconds
    dram_bandwidth_gbps: Annotated[
        float, Meta(gt=0, description="DRAM bandwidth shared by all sub-accelerators (GB/s).")
    ]
    accelerators: Annotated[tuple[SubAccelerator, ...], Meta(min_length=1)]
    models: tuple[DnnModel, ...]
    tenants: Annotated[
        tuple[DispatchTenant, ...],
        Meta(description="Tenants with their weights; requests of unlisted tenants weigh 1."),
    ] = ()
    requests: tuple[PendingInference, ...] = ()

    @cached_property
    def model_by_name(self) -> dict[str, DnnModel]:
        return {m.name: m for m in self.models}


def dispatch_problems(snapshot: DispatchSnapshot) -> list[Problem]:
    """Every cross-field problem of `snapshot`, each at its JSON path (empty: valid)."""
    problems: list[Problem] = []

    def add(path: str, message: str) -> None:
        problems.append(Problem(path=path, message=message))

    def unique(items: tuple[object, ...], key: str, label: str) -> set[str]:
        seen: set[str] = set()
        for i, item in enumerate(items):
            value = getattr(item, key)
            if value in seen:
                add(f"{label}[{i}].{key}", f"duplicate {key} {value!r}")
            seen.add(value)
        return seen

    if not math.isfinite(snapshot.now):
        add("now", "not a finite number")
    if not math.isfinite(snapshot.dram_bandwidth_gbps):
        add("dram_bandwidth_gbps", "not a finite number")
    unique(snapshot.accelerators, "id", "accelerators")
    unique(snapshot.models, "name", "models")
    unique(snapshot.tenants, "id", "tenants")
    request_ids = unique(snapshot.requests, "id", "requests")
    for m, model in enumerate(snapshot.models):
        for i, layer in enumerate(model.layers):
            styles: set[str] = set()
            for c, cost in enumerate(layer.costs):
                at = f"models[{m}].layers[{i}].costs[{c}]"
                if cost.style in styles:
                    add(f"{at}.style", f"duplicate style {cost.style!r}")
                styles.add(cost.style)
                for name in ("latency_s", "bandwidth_gbps", "energy_j"):
                    if not math.isfinite(getattr(cost, name)):
                        add(f"{at}.{name}", "not a finite number")
    models = snapshot.model_by_name
    tenants = {t.id for t in snapshot.tenants}
    by_id = {r.id: r for r in snapshot.requests}
    for i, request in enumerate(snapshot.requests):
        at = f"requests[{i}]"
        if tenants and request.tenant not in tenants:
            add(f"{at}.tenant", f"unknown tenant {request.tenant!r}")
        requested = models.get(request.model)
        if requested is None:
            add(f"{at}.model", f"unknown model {request.model!r}")
        elif request.next_layer >= len(requested.layers):
            add(
                f"{at}.next_layer",
                f"{request.next_layer} but {requested.name!r} has {len(requested.layers)} layers "
                "(a finished request is not pending)",
            )
        for name in ("arrival", "deadline"):
            if not math.isfinite(getattr(request, name)):
                add(f"{at}.{name}", "not a finite number")
        if request.arrival > snapshot.now:
            add(f"{at}.arrival", f"{request.arrival} is after now ({snapshot.now})")
        if request.deadline < request.arrival:
            add(f"{at}.deadline", f"{request.deadline} is before the arrival ({request.arrival})")
    running_on: dict[str, int] = {}
    for a, accelerator in enumerate(snapshot.accelerators):
        running = accelerator.running
        if running is None:
            continue
        at = f"accelerators[{a}].running"
        if not math.isfinite(running.remaining_s):
            add(f"{at}.remaining_s", "not a finite number")
        if running.request_id not in request_ids:
            add(f"{at}.request_id", f"unknown request {running.request_id!r}")
            continue
        if running.request_id in running_on:
            add(
                f"{at}.request_id",
                f"request {running.request_id!r} already runs on accelerators"
                f"[{running_on[running.request_id]}]",
            )
        running_on[running.request_id] = a
        request = by_id[running.request_id]
        if running.layer != request.next_layer:
            add(
                f"{at}.layer",
                f"{running.layer}, but the request's next_layer is {request.next_layer}",
            )
            continue
        running_model = models.get(request.model)
        if (
            running_model is not None
            and running.layer < len(running_model.layers)
            and accelerator.style not in running_model.layers[running.layer].by_style
        ):
            add(
                f"{at}.layer",
                f"layer {running.layer} of {running_model.name!r} has no cost for style "
                f"{accelerator.style!r}",
            )
    return problems


# -- what a policy chooses --------------------------------------------------------------------


class LayerStart(Frozen, frozen=True, kw_only=True):
    """Start `request_id`'s next layer on `accelerator_id` (an idle one)."""

    request_id: str
    accelerator_id: str


class DispatchChoice(Frozen, frozen=True, kw_only=True):
    """A policy's answer; :func:`policies.dispatch.run.run_dispatch` checks it before use.

    `starts` in start order; `reasons` says why a ready request starts or waits (one
    without a reason gets a generic one).
    """

    starts: tuple[LayerStart, ...] = ()
    reasons: dict[str, str] = field(default_factory=dict)


# -- what the service answers ----------------------------------------------------------------


class RequestStatus(StrEnum):
    STARTED = "started"  # its next layer starts now, on `accelerator_id`
    RUNNING = "running"  # its next layer is already in flight
    WAITING = "waiting"


class DispatchEntry(Frozen, frozen=True, kw_only=True):
    request_id: str
    status: RequestStatus
    accelerator_id: Annotated[
        str | None, Meta(description="Where its next layer starts (started) or runs (running).")
    ] = None
    order: Annotated[
        int | None, Meta(description="Start order among this answer's starts (0 first).")
    ] = None
    layer: Annotated[int, Meta(description="Index of the layer this entry is about.")]
    reason: Annotated[str, Meta(description="Why it starts, runs or waits; one per request.")]
    deadline_feasible: Annotated[
        bool,
        Meta(
            description=(
                "False: even alone, on the fastest sub-accelerator for each remaining layer, "
                "it would finish after its deadline. Reported, still served."
            )
        ),
    ]
    earliest_finish: Annotated[
        float, Meta(description="That best-case finish time (seconds), contention ignored.")
    ]


class DispatchStart(Frozen, frozen=True, kw_only=True):
    request_id: str
    accelerator_id: str
    layer: int
    order: int


class DispatchResult(Frozen, frozen=True, kw_only=True):
    starts: Annotated[
        tuple[DispatchStart, ...],
        Meta(description="Layers to start now, in start order; at most one per sub-accelerator."),
    ] = ()
    requests: Annotated[
        tuple[DispatchEntry, ...], Meta(description="One entry per request, in snapshot order.")
    ] = ()
    late: Annotated[
        tuple[str, ...], Meta(description="Requests that can no longer meet their deadline.")
    ] = ()
    fallback: (
        Annotated[
            Fallback,
            Meta(description="Set when the profile's policy failed and its fallback answered."),
        ]
        | None
    ) = None


class DispatchDecision(DispatchResult, frozen=True, kw_only=True):
    """A dispatch as the service answers and logs it."""

    decision_id: str
    system_id: str
    now: float
    profile: str
    policy: PolicyRef
