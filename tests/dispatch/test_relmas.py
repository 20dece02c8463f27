"""RELMAS: falls back to EDF (and says why) without a usable model, round-trips its
weights as tensors only, and trains end to end on a tiny budget."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from policies.dispatch.edf import EdfDispatch
from policies.dispatch.relmas import RelmasDispatch, RelmasParams
from policies.dispatch.run import run_dispatch
from policies.dispatch.view import DispatchView, progress_rate
from policies.learned.models import ModelBlob, ModelLoadError, StaticModels
from policies.learned.relmas.features import build_round
from policies.learned.relmas.network import RelmasConfig, RelmasModel
from policies.protocols import NoParams
from policies.registry import build_registry
from simulator.accelerator.costs import load_costs
from simulator.accelerator.dispatchers import InProcessDispatcher
from simulator.accelerator.system import run_episode
from simulator.accelerator.workload import arrivals, scenarios
from tests.dispatch.builders import request, snapshot
from training.relmas.train import Args, train

SNAP = snapshot([request("a", deadline=30.0), request("b", deadline=20.0), request("c")])


def test_without_a_model_relmas_falls_back_to_edf_and_says_why() -> None:
    policy = RelmasDispatch(RelmasParams(use_shipped_model=False))
    result, used = run_dispatch(policy, SNAP, EdfDispatch(NoParams()))
    assert used.name == "edf"
    assert result.fallback is not None
    assert result.fallback.policy == "edf"
    assert "no RELMAS model version is active" in result.fallback.reason
    expected, _ = run_dispatch(EdfDispatch(NoParams()), SNAP)
    assert result.starts == expected.starts


def test_a_model_version_that_does_not_load_falls_back_with_its_reason() -> None:
    blob = ModelBlob(policy="relmas", version="v-broken", weights=b"not safetensors at all")
    policy = build_registry().dispatch("relmas", {}, StaticModels({"relmas": blob}))
    result, _ = run_dispatch(policy, SNAP, EdfDispatch(NoParams()))
    assert result.fallback is not None
    assert "v-broken" in result.fallback.reason


def test_a_round_over_the_latency_budget_falls_back() -> None:
    model = RelmasModel.initial(RelmasConfig(), seed=1)
    policy = RelmasDispatch.with_model(model, params=RelmasParams(latency_budget_ms=0.0))
    result, _ = run_dispatch(policy, SNAP, EdfDispatch(NoParams()))
    assert result.fallback is not None
    assert "budget" in result.fallback.reason


def test_weights_round_trip_as_tensors_only_with_identical_scores() -> None:
    model = RelmasModel.initial(RelmasConfig(hidden=8), seed=3)
    loaded = RelmasModel.from_bytes(model.to_bytes())
    features = build_round(DispatchView(SNAP), model.config.styles).features
    assert np.array_equal(model.scores(features), loaded.scores(features))
    with pytest.raises(ModelLoadError):
        RelmasModel.from_bytes(model.to_bytes()[:-10])


def test_numpy_scores_equal_the_torch_network() -> None:
    model = RelmasModel.initial(RelmasConfig(), seed=4)
    features = build_round(DispatchView(SNAP), model.config.styles).features
    with torch.no_grad():
        reference = model.network(torch.from_numpy(features)).numpy()
    assert np.allclose(model.scores(features), reference, atol=1e-5)


def test_a_tiny_training_run_gives_a_model_that_serves_within_the_contract() -> None:
    budget = dataclasses.replace(
        Args(),
        scenarios=("heavy-homogeneous",),
        hidden=8,
        imitation_episodes=1,
        imitation_epochs=1,
        imitation_rounds_per_epoch=64,
        updates=1,
        episodes_per_update=1,
        rounds_per_update=64,
        validation_episodes=1,
        episode_requests=6,
    )
    report = train(budget)
    assert set(report.validation) == {"imitation", "update-1"}
    assert report.chosen in report.validation
    assert all(0.0 <= v <= 1.0 for v in report.validation.values())
    policy = RelmasDispatch.with_model(RelmasModel.from_bytes(report.model.to_bytes()))
    result, used = run_dispatch(policy, SNAP)
    assert used.name == "relmas"
    assert result.fallback is None
    assert len({s.accelerator_id for s in result.starts}) == len(result.starts) == 2


def _features_by_definition(view: DispatchView, styles: tuple[str, ...]) -> list[list[float]]:
    """Each candidate pair's features, one pair at a time, as docs/relmas.md defines them."""
    now, budget, in_use = view.now, view.budget_gbps, view.bandwidth_in_use_gbps
    online = [a for a in view.accelerators if a.online]
    idle = {a.id for a in view.idle}
    late = sum(1 for r in view.requests if not r.feasible)
    glob = [
        len(view.ready) / 64.0,
        late / max(1, len(view.requests)),
        min(in_use / budget, 4.0),
        len(idle) / max(1, len(online)),
    ]
    rows = []
    for info in view.ready:
        isolated = max(info.isolated_s, 1e-9)
        slack = info.slack_s
        best = view.best_latency(info)
        for accelerator in online:
            cost = info.layer.by_style.get(accelerator.style)
            if cost is None:
                continue
            wait = 0.0 if accelerator.id in idle else view.free_at[accelerator.id] - now
            rate = progress_rate(in_use + cost.bandwidth_gbps, budget)
            finish = wait + cost.latency_s / rate
            rows.append(
                [
                    min(max(slack / isolated, -3.0), 10.0),
                    1.0 if slack >= 0 else 0.0,
                    info.best_remaining_s / isolated,
                    min(max(now - info.request.arrival, 0.0) / isolated, 20.0),
                    math.log10(isolated * 1e3 + 1e-3),
                    math.copysign(math.log1p(abs(slack) * 1e3), slack),
                    math.log(cost.latency_s / best),
                    cost.latency_s / isolated,
                    cost.bandwidth_gbps / budget,
                    rate,
                    min(wait / isolated, 20.0),
                    0.0 if accelerator.id in idle else 1.0,
                    min(max(finish / max(slack + best, 1e-9), -5.0), 5.0)
                    if slack + best > 0
                    else 5.0,
                    *[1.0 if accelerator.style == s else 0.0 for s in styles],
                    *glob,
                ]
            )
    return rows


def test_round_features_equal_their_per_pair_definition() -> None:
    styles = RelmasConfig().styles
    costs = load_costs()
    scenario = scenarios()["heavy-mixed"]
    kept = run_episode(
        scenario,
        costs,
        arrivals(scenario, costs, 5)[:30],
        InProcessDispatcher("edf"),
        keep_snapshots=300,
    ).snapshots
    assert len(kept) > 50
    for snap in kept[::10]:
        view = DispatchView(snap)
        round_ = build_round(view, styles)
        expected = np.asarray(_features_by_definition(view, styles), dtype=np.float32)
        assert round_.features.shape == expected.shape
        assert np.allclose(round_.features, expected, rtol=1e-6, atol=1e-6)
