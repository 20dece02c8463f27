"""RELMAS's view of a dispatch round: candidate (request, sub-accelerator) pairs and
their features, and how a round's scores become starts.

Blanco et al., "Deep Reinforcement Learning based Online Scheduling Policy for Deep
Neural Network Multi-Tenant Multi-Accelerator Systems" (RELMAS), DAC 2024. The paper
observes the pending requests' next-layer latency and bandwidth need on each
sub-accelerator and their deadlines; what follows is our concrete form of that state
(docs/relmas.md marks each choice paper / ours). The serving policy and the trainer
build rounds with this module, so what the network is trained on is what it serves.

**Candidates.** Every ready request (next layer not in flight) paired with every
online sub-accelerator whose style runs that layer, busy ones included: choosing a
busy one means waiting for it, as a faster style that frees soon may beat a slow idle
one.

**Features** of a pair (`FEATURES` names them): the request's slack, remaining and
waited time relative to its isolated time, whether it can still meet its deadline,
its size; the pair's latency against the layer's best, its share of the request,
its bandwidth against the budget, the speed the contention model promises if it
starts now, how long until the sub-accelerator frees, the layer's estimated finish
against the slack, and the style (one-hot over a vocabulary saved with the model);
then four global inputs (ready requests, share already late, bandwidth in use, idle
share).

**Decoding a round.** The network scores every pair once; pairs are then taken in
order of score, each removing its request and its sub-accelerator, until one or the
other runs out. A pair on an idle sub-accelerator starts; on a busy one, the request
waits for it. Training reads the same order as a sequence of choices among the pairs
still open (a Plackett-Luce distribution over the scores).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from policies.dispatch.model import DispatchChoice, LayerStart
from policies.dispatch.view import DispatchView

REQUEST_FEATURES = (
    "slack_over_isolated",
    "feasible",
    "remaining_over_isolated",
    "waited_over_isolated",
    "log_isolated_ms",
    "log_slack_ms",
)
PAIR_FEATURES = (
    "log_latency_over_best",
    "latency_over_isolated",
    "bandwidth_over_budget",
    "rate_if_started",
    "wait_over_isolated",
    "busy",
    "finish_over_slack",
)
GLOBAL_FEATURES = ("ready_over_64", "late_share", "bandwidth_in_use", "idle_share")


def feature_count(styles: tuple[str, ...]) -> int:
    return len(REQUEST_FEATURES) + len(PAIR_FEATURES) + len(styles) + len(GLOBAL_FEATURES)


@dataclass(frozen=True)
class Round:
    """One round's candidates: `features[i]` describes pair i = (request, accelerator)."""

    features: np.ndarray
    request_of: np.ndarray
    """Index into `request_ids` of each pair."""
    accelerator_of: np.ndarray
    """Index into `accelerator_ids` of each pair."""
    request_ids: tuple[str, ...]
    accelerator_ids: tuple[str, ...]
    idle: np.ndarray
    """Per accelerator: True when idle (a pick starts), False when busy (a pick waits)."""


def build_round(view: DispatchView, styles: tuple[str, ...]) -> Round:
    """The candidate pairs of `view` and their features (float32).

    Worked out as (request × sub-accelerator) arrays: a round of 64 requests on four
    sub-accelerators has ~200 pairs, and a Python loop over them costs more than the
    network (docs/relmas.md, "Decision time").
    """
    now = view.now
    budget = view.budget_gbps
    in_use = view.bandwidth_in_use_gbps
    online = [a for a in view.accelerators if a.online]
    accelerator_ids = tuple(a.id for a in online)
    idle_ids = {a.id for a in view.idle}
    idle = np.asarray([a in idle_ids for a in accelerator_ids], dtype=bool)
    ready = view.ready
    width = feature_count(styles)
    if not ready or not online:
        return Round(
            features=np.zeros((0, width), dtype=np.float32),
            request_of=np.zeros(0, dtype=np.int64),
            accelerator_of=np.zeros(0, dtype=np.int64),
            request_ids=tuple(r.id for r in ready),
            accelerator_ids=accelerator_ids,
            idle=idle,
        )
    system_styles = sorted({a.style for a in online})
    slot_of = {style: i for i, style in enumerate(system_styles)}
    latency = np.full((len(ready), len(system_styles)), np.inf)
    bandwidth = np.zeros((len(ready), len(system_styles)))
    for i, info in enumerate(ready):
        for cost in info.layer.costs:
            j = slot_of.get(cost.style)
            if j is not None:
                latency[i, j] = cost.latency_s
                bandwidth[i, j] = cost.bandwidth_gbps
    style_of = np.asarray([slot_of[a.style] for a in online])
    pair_latency = latency[:, style_of]
    pair_bandwidth = bandwidth[:, style_of]
    valid = np.isfinite(pair_latency)
    best = latency.min(axis=1)

    isolated = np.maximum(np.asarray([r.isolated_s for r in ready]), 1e-9)
    slack = np.asarray([r.slack_s for r in ready])
    remaining = np.asarray([r.best_remaining_s for r in ready])
    waited = np.maximum(now - np.asarray([r.request.arrival for r in ready]), 0.0)
    request_part = np.stack(
        (
            np.clip(slack / isolated, -3.0, 10.0),
            (slack >= 0).astype(float),
            remaining / isolated,
            np.minimum(waited / isolated, 20.0),
            np.log10(isolated * 1e3 + 1e-3),
            np.sign(slack) * np.log1p(np.abs(slack) * 1e3),
        ),
        axis=1,
    )

    wait = np.asarray([0.0 if a.id in idle_ids else view.free_at[a.id] - now for a in online])[
        None, :
    ]
    demand = in_use + pair_bandwidth
    rate = np.where(demand <= budget, 1.0, budget / np.maximum(demand, 1e-300))
    with np.errstate(invalid="ignore", divide="ignore"):
        finish = wait + pair_latency / rate
        reach = (slack + best)[:, None]
        finish_over_slack = np.where(
            reach > 0, np.clip(finish / np.maximum(reach, 1e-9), -5.0, 5.0), 5.0
        )
        log_latency = np.where(best[:, None] > 0, np.log(pair_latency / best[:, None]), 0.0)
    pair_part = np.stack(
        (
            log_latency,
            pair_latency / isolated[:, None],
            pair_bandwidth / budget,
            rate,
            np.broadcast_to(np.minimum(wait / isolated[:, None], 20.0), valid.shape),
            np.broadcast_to((~idle).astype(float)[None, :], valid.shape),
            finish_over_slack,
        ),
        axis=2,
    )
    vocabulary = {s: i for i, s in enumerate(styles)}
    one_hot = np.zeros((len(online), len(styles)))
    for k, accelerator in enumerate(online):
        slot = vocabulary.get(accelerator.style)
        if slot is not None:
            one_hot[k, slot] = 1.0
    late = sum(1 for r in view.requests if not r.feasible)
    glob = np.asarray(
        (
            len(ready) / 64.0,
            late / max(1, len(view.requests)),
            min(in_use / budget, 4.0),
            len(idle_ids) / max(1, len(online)),
        )
    )
    rows, cols = np.nonzero(valid)
    features = np.concatenate(
        (
            request_part[rows],
            pair_part[rows, cols],
            one_hot[cols],
            np.broadcast_to(glob, (len(rows), len(glob))),
        ),
        axis=1,
    ).astype(np.float32)
    return Round(
        features=features,
        request_of=rows.astype(np.int64),
        accelerator_of=cols.astype(np.int64),
        request_ids=tuple(r.id for r in ready),
        accelerator_ids=accelerator_ids,
        idle=idle,
    )


def pick_order(round_: Round, scores: np.ndarray) -> list[int]:
    """Pairs taken in score order, each closing its request and sub-accelerator."""
    order = np.argsort(-scores, kind="stable")
    used_requests: set[int] = set()
    used_accelerators: set[int] = set()
    picks: list[int] = []
    limit = min(len(round_.request_ids), len(round_.accelerator_ids))
    for pair in order:
        r = int(round_.request_of[pair])
        a = int(round_.accelerator_of[pair])
        if r in used_requests or a in used_accelerators:
            continue
        picks.append(int(pair))
        used_requests.add(r)
        used_accelerators.add(a)
        if len(picks) == limit:
            break
    return picks


def choice_from_picks(round_: Round, picks: list[int], label: str) -> DispatchChoice:
    """The starts (picks on idle sub-accelerators) and reasons of a round's picks."""
    starts: list[LayerStart] = []
    reasons: dict[str, str] = dict.fromkeys(
        round_.request_ids, f"{label}: ranked below this round's picks"
    )
    for rank, pair in enumerate(picks):
        request_id = round_.request_ids[int(round_.request_of[pair])]
        a = int(round_.accelerator_of[pair])
        accelerator_id = round_.accelerator_ids[a]
        if round_.idle[a]:
            starts.append(LayerStart(request_id=request_id, accelerator_id=accelerator_id))
            reasons[request_id] = f"{label}: pick {rank} of the round, starts on {accelerator_id}"
        else:
            reasons[request_id] = (
                f"{label}: pick {rank} of the round, waits for {accelerator_id} (busy)"
            )
    return DispatchChoice(starts=tuple(starts), reasons=reasons)
