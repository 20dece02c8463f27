"""DL2 scaling: the round it plays, its model's save/load, and every way it falls back."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import cast

import numpy as np
import pytest
import torch
from safetensors.torch import save as save_tensors

from policies.common.pool import FloorParams
from policies.decision import JobStatus, Stage
from policies.engine import Pipeline
from policies.learned.dl2.features import ADD_BOTH, ADD_PS, ADD_WORKER, Allocation, Dl2Config
from policies.learned.dl2.network import Dl2Model
from policies.learned.dl2.shipped import SHIPPED_SRTF_FILE, shipped_bytes, shipped_model
from policies.learned.models import (
    InvalidActionError,
    ModelBlob,
    ModelLoadError,
    StaticModels,
)
from policies.model import JobState, ScalingRule, Snapshot
from policies.profiles import Profile, load_profiles
from policies.protocols import ScalingPolicy
from policies.registry import build_registry
from policies.scaling.dl2 import Dl2Params, Dl2Scaling
from tests.policies.builders import (
    ctx,
    decide,
    full_cluster_with_a_short_job_waiting,
    job,
    node,
    running,
    snap,
    statuses,
)
from tests.policies.checks import assert_valid_decision

REGISTRY = build_registry()
PROFILE: Profile = load_profiles(REGISTRY)["dl2"]
CONFIG = Dl2Config(window=4, families=("resnet50", "bert"), hidden=(16, 8))


def elastic_snapshot() -> Snapshot:
    return snap(
        [node("n0", gpus=8), node("n1", gpus=8)],
        [
            running("r", {"n0": (0, 1)}, workers=2, min_workers=1, max_workers=8, model="bert"),
            job(
                "p2",
                workers=2,
                min_workers=1,
                max_workers=8,
                scaling_rule=ScalingRule.POWER_OF_TWO,
                model="resnet50",
                submit_time=-600.0,
            ),
            job("ps", workers=1, min_workers=1, max_workers=2, ps=1, max_ps=3, ps_cpus=1.0),
            job("rigid", workers=3),
        ],
        now=0.0,
    )


class _Greedy(Dl2Model):
    """Always the first valid job action: grows jobs as far as the pool allows."""

    def _choose(
        self,
        logits: np.ndarray,
        mask: np.ndarray,
        deterministic: bool,
        rng: np.random.Generator | None,
    ) -> int:
        return int(np.flatnonzero(mask)[0])


class _PicksMasked(Dl2Model):
    """A broken model: answers with an action the mask forbids."""

    def _choose(
        self,
        logits: np.ndarray,
        mask: np.ndarray,
        deterministic: bool,
        rng: np.random.Generator | None,
    ) -> int:
        return int(np.flatnonzero(~mask)[0])


def _pipeline(policy: Dl2Scaling) -> Pipeline:
    built = Pipeline.build(PROFILE, REGISTRY)
    return replace(built, scaling=cast(ScalingPolicy, policy))


# -- the round --------------------------------------------------------------------------------
def test_floor_keeps_running_jobs_and_gives_waiting_ones_their_minimum() -> None:
    snapshot = elastic_snapshot()
    allocation = Allocation(snapshot, list(snapshot.jobs), CONFIG)
    assert allocation.allocation("r") == (2, 0)
    assert allocation.allocation("p2") == (1, 0)
    assert allocation.allocation("ps") == (1, 1)
    assert allocation.allocation("rigid") == (3, 0)
    # The rigid job cannot grow, so it takes no slot of the window.
    assert [slot.job.id for slot in allocation.window] == ["r", "p2", "ps"]


def test_masks_follow_step_rules_caps_and_empty_slots() -> None:
    snapshot = elastic_snapshot()
    allocation = Allocation(snapshot, list(snapshot.jobs), CONFIG)
    mask = allocation.mask()
    assert mask.shape == (CONFIG.actions,)
    assert mask[CONFIG.stop_action]
    assert mask[0 * 3 + ADD_WORKER]
    assert not mask[0 * 3 + ADD_PS], "an all-reduce job takes no parameter server"
    assert mask[2 * 3 + ADD_PS]
    assert mask[2 * 3 + ADD_BOTH]
    assert not mask[3 * 3 : CONFIG.stop_action].any(), "the empty slot is masked"
    allocation.apply(1 * 3 + ADD_WORKER)
    assert allocation.allocation("p2") == (2, 0), "power of two: 1 -> 2"
    allocation.apply(1 * 3 + ADD_WORKER)
    assert allocation.allocation("p2") == (4, 0), "power of two: 2 -> 4"
    with pytest.raises(InvalidActionError):
        allocation.apply(3 * 3 + ADD_WORKER)


def test_observation_is_finite_and_sized_by_the_config() -> None:
    snapshot = elastic_snapshot()
    state = Allocation(snapshot, list(snapshot.jobs), CONFIG).observation()
    assert state.shape == (CONFIG.input_size,)
    assert state.dtype == np.float32
    assert np.isfinite(state).all()
    assert len(CONFIG.feature_names()) == CONFIG.input_size


def test_greedy_growth_stays_within_bounds_steps_and_capacity() -> None:
    snapshot = elastic_snapshot()
    policy = Dl2Scaling.with_model(_Greedy.initial(CONFIG))
    results = {r.job_id: r for r in policy.scale(ctx(snapshot), list(snapshot.jobs))}
    jobs = snapshot.jobs_by_id
    for r in results.values():
        assert jobs[r.job_id].accepts_workers(r.workers), r
    assert sum(r.workers for r in results.values()) <= 16
    assert results["rigid"].workers == 3
    assert 1 <= results["ps"].ps <= 3
    assert results["p2"].workers in (1, 2, 4, 8)
    decision = _pipeline(policy).decide(snapshot, decision_id="d")
    assert_valid_decision(snapshot, decision)
    assert decision.fallback is None


def test_window_limits_the_jobs_the_model_may_grow() -> None:
    jobs = [job(f"j{i}", workers=1, min_workers=1, max_workers=4) for i in range(6)]
    snapshot = snap([node("n0", gpus=16)], jobs)
    policy = Dl2Scaling.with_model(_Greedy.initial(CONFIG))
    results = policy.scale(ctx(snapshot), list(snapshot.jobs))
    by_id = {r.job_id: r for r in results}
    assert by_id["j4"].workers == 1
    assert "outside the model's window of 4" in by_id["j4"].reason
    assert by_id["j0"].workers == 4


def test_rescaling_running_jobs_is_a_parameter() -> None:
    snapshot = snap(
        [node("n0")],
        [running("r", {"n0": (0, 1, 2, 3)}, workers=4, min_workers=1, max_workers=4)],
    )
    stops_at_once = Dl2Model.initial(CONFIG)
    with torch.no_grad():
        stops_at_once.network.output.bias[CONFIG.stop_action] = 1e6
    kept = Dl2Scaling.with_model(stops_at_once)
    assert kept.scale(ctx(snapshot), list(snapshot.jobs))[0].workers == 4
    rescaled = Dl2Scaling.with_model(stops_at_once, params=Dl2Params(keep_running=False))
    assert rescaled.scale(ctx(snapshot), list(snapshot.jobs))[0].workers == 1


def test_a_waiting_job_over_a_full_pool_gets_its_minimum_only_with_the_parameter() -> None:
    snapshot = snap(
        [node("n0")],
        [
            running("long", {"n0": tuple(range(8))}, workers=8, estimated_duration_s=50_000),
            job("short", workers=4, min_workers=2, max_workers=8, estimated_duration_s=600,
                submit_time=10, ps=1, ps_cpus=1.0),
        ],
    )  # fmt: skip
    jobs = list(snapshot.jobs)
    bound = Allocation(snapshot, jobs, CONFIG)
    assert bound.allocation("short") == (0, 0)
    over = Allocation(snapshot, jobs, CONFIG, floor=FloorParams(minimum_when_full=True))
    # Its minimum and one server, taken from no pool and offered to no action: the job
    # still waits as far as the model sees, and the state is the pool-bound one.
    assert over.allocation("short") == (2, 1)
    assert over.pool.left == bound.pool.left
    assert over.window == []
    assert over.waiting == bound.waiting == 1
    assert np.array_equal(over.observation(), bound.observation())
    reason = {r.job_id: r.reason for r in over.results("model m")}["short"]
    assert "with 0 GPUs left in the pool: it starts only if the ordering stops" in reason
    # Behind SRTF (the optimus profile's ordering) the shorter job then preempts the long one.
    profile = load_profiles(REGISTRY)["optimus"]
    stops_at_once = Dl2Model.initial(CONFIG)
    with torch.no_grad():
        stops_at_once.network.output.bias[CONFIG.stop_action] = 1e6
    for params, expected in (
        (Dl2Params(), {"long": JobStatus.RUNNING, "short": JobStatus.PENDING}),
        (
            Dl2Params(minimum_when_full=True),
            {"long": JobStatus.PREEMPTED, "short": JobStatus.STARTED},
        ),
    ):
        policy = Dl2Scaling.with_model(stops_at_once, params=params)
        built = replace(Pipeline.build(profile, REGISTRY), scaling=cast(ScalingPolicy, policy))
        decision = built.decide(snapshot, decision_id="test", seed=0)
        assert {e.job_id: e.status for e in decision.explanations} == expected


# -- the model ----------------------------------------------------------------------------------
def test_save_load_round_trip_gives_identical_actions() -> None:
    model = Dl2Model.initial(CONFIG, seed=5)
    loaded = Dl2Model.from_bytes(model.to_bytes())
    assert loaded.config == model.config
    rng = np.random.default_rng(0)
    for _ in range(50):
        state = rng.normal(size=CONFIG.input_size).astype(np.float32)
        mask = rng.random(CONFIG.actions) < 0.5
        mask[CONFIG.stop_action] = True
        assert loaded.predict(state, mask) == model.predict(state, mask)
        with torch.no_grad():
            tensor = torch.from_numpy(state).unsqueeze(0)
            assert torch.equal(loaded.logits(tensor), model.logits(tensor))
    snapshot = elastic_snapshot()
    first = Dl2Scaling.with_model(model).scale(ctx(snapshot), list(snapshot.jobs))
    again = Dl2Scaling(Dl2Params(), ModelBlob(policy="dl2", version="v1", weights=model.to_bytes()))
    assert [(r.workers, r.ps) for r in first] == [
        (r.workers, r.ps) for r in again.scale(ctx(snapshot), list(snapshot.jobs))
    ]


def test_serving_logits_equal_the_torch_module() -> None:
    model = Dl2Model.initial(CONFIG, seed=2)
    rng = np.random.default_rng(1)
    states = rng.normal(size=(64, CONFIG.input_size)).astype(np.float32)
    with torch.no_grad():
        reference = model.logits(torch.from_numpy(states)).numpy()
    served = np.stack([model.state_logits(state) for state in states])
    np.testing.assert_allclose(served, reference, rtol=1e-5, atol=1e-5)
    assert (served.argmax(-1) == reference.argmax(-1)).all()
    # Views of the parameters: an in-place update (as an optimizer does) shows at once.
    with torch.no_grad():
        model.network.output.bias[0] += 100.0
    assert model.predict(states[0], np.ones(CONFIG.actions, dtype=bool)) == 0


def test_sampling_draws_valid_actions_reproducibly() -> None:
    model = Dl2Model.initial(CONFIG, seed=2)
    state = np.zeros(CONFIG.input_size, dtype=np.float32)
    mask = np.zeros(CONFIG.actions, dtype=bool)
    mask[[1, 5, CONFIG.stop_action]] = True
    draws = [
        model.predict(state, mask, deterministic=False, rng=np.random.default_rng(9))
        for _ in range(3)
    ]
    assert len(set(draws)) == 1
    rng = np.random.default_rng(0)
    seen = {model.predict(state, mask, deterministic=False, rng=rng) for _ in range(200)}
    assert seen <= {1, 5, CONFIG.stop_action}
    assert len(seen) > 1


def test_same_seed_gives_the_same_initial_weights() -> None:
    assert (
        Dl2Model.initial(CONFIG, seed=3).to_bytes() == Dl2Model.initial(CONFIG, seed=3).to_bytes()
    )
    assert (
        Dl2Model.initial(CONFIG, seed=3).to_bytes() != Dl2Model.initial(CONFIG, seed=4).to_bytes()
    )


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda b: b[:100], "header|too short|weights"),
        (lambda b: b"\x00" * 64, "header|metadata"),
        (lambda b: b[: len(b) // 2], "weights"),
        (lambda b: b.replace(b"arbiter-dl2", b"arbiter-xx2"), "not a DL2 model"),
    ],
)
def test_load_refuses_damaged_bytes(damage: object, message: str) -> None:
    data = Dl2Model.initial(CONFIG).to_bytes()
    assert callable(damage)
    with pytest.raises(ModelLoadError, match=message):
        Dl2Model.from_bytes(damage(data))


def test_load_refuses_weights_of_another_shape_and_non_finite_ones() -> None:
    other = Dl2Model.initial(CONFIG.model_copy(update={"hidden": (8, 8)}))
    data = save_tensors(
        dict(other.network.state_dict()),
        metadata={"arbiter": json.dumps(Dl2Model.initial(CONFIG).meta())},
    )
    with pytest.raises(ModelLoadError, match="do not fit"):
        Dl2Model.from_bytes(data)
    broken = Dl2Model.initial(CONFIG)
    with torch.no_grad():
        broken.network.hidden1.weight[0, 0] = float("nan")
    with pytest.raises(ModelLoadError, match="non-finite"):
        Dl2Model.from_bytes(broken.to_bytes())


def test_predict_checks_its_inputs() -> None:
    model = Dl2Model.initial(CONFIG)
    mask = np.ones(CONFIG.actions, dtype=bool)
    with pytest.raises(ValueError, match="shape"):
        model.predict(np.zeros(3, dtype=np.float32), mask)
    with pytest.raises(ValueError, match="masked"):
        model.predict(np.zeros(CONFIG.input_size, dtype=np.float32), ~mask)
    with pytest.raises(ValueError, match="non-finite"):
        model.predict(np.full(CONFIG.input_size, np.nan, dtype=np.float32), mask)


def test_the_shipped_model_loads_and_names_its_version() -> None:
    shipped = shipped_model()
    assert shipped.version.startswith("shipped-")
    assert len(shipped_bytes()) < 512 * 1024, "a few hundred KB at most"
    decision = Pipeline.build(PROFILE, REGISTRY).decide(elastic_snapshot(), decision_id="d")
    assert decision.fallback is None
    assert decision.policies[Stage.SCALING.value].version == f"1+{shipped.version}"


def test_the_dl2_srtf_profile_serves_its_own_shipped_model() -> None:
    ours, theirs = shipped_model(SHIPPED_SRTF_FILE), shipped_model()
    assert ours.version.startswith("shipped-")
    assert ours.version != theirs.version
    assert len(shipped_bytes(SHIPPED_SRTF_FILE)) < 512 * 1024
    decision = Pipeline.build(load_profiles(REGISTRY)["dl2-srtf"], REGISTRY).decide(
        elastic_snapshot(), decision_id="d"
    )
    assert decision.fallback is None
    assert decision.policies[Stage.SCALING.value].version == f"1+{ours.version}"


def test_the_dl2_srtf_profile_stops_a_long_job_for_a_short_one_where_dl2_waits() -> None:
    snapshot = full_cluster_with_a_short_job_waiting()
    preemptive = decide(snapshot, "dl2-srtf")
    assert preemptive.fallback is None
    assert statuses(preemptive) == {"long": JobStatus.PREEMPTED, "short": JobStatus.STARTED}
    assert statuses(decide(snapshot, "dl2")) == {
        "long": JobStatus.RUNNING,
        "short": JobStatus.PENDING,
    }


def test_the_dl2_srtf_profile_falls_back_to_optimus_with_the_same_floor() -> None:
    profile = load_profiles(REGISTRY)["dl2-srtf"]
    models = StaticModels(
        {"dl2-srtf": ModelBlob(policy="dl2-srtf", version="v1", weights=b"garbage!")}
    )
    decision = Pipeline.build(profile, REGISTRY, models).decide(elastic_snapshot(), decision_id="d")
    assert decision.fallback is not None
    assert decision.fallback.policy == "optimus"
    assert "model version 'v1' did not load" in decision.fallback.reason
    fallback = profile.fallback[Stage.SCALING]
    assert fallback.params == {"minimum_when_full": True} == profile.scaling.params
    # The other DL2 profile's versions are not this one's.
    served = Pipeline.build(PROFILE, REGISTRY, models).decide(elastic_snapshot(), decision_id="d")
    assert served.fallback is None


# -- falling back -------------------------------------------------------------------------------
def _fallback_reason(pipeline: Pipeline, snapshot: Snapshot | None = None) -> str:
    shown = snapshot or elastic_snapshot()
    decision = pipeline.decide(shown, decision_id="d")
    assert_valid_decision(shown, decision)
    assert decision.fallback is not None
    assert decision.fallback.policy == "drf"
    assert decision.policies[Stage.SCALING.value].name == "drf"
    return decision.fallback.reason


def test_corrupt_model_bytes_fall_back_to_drf() -> None:
    models = StaticModels({"dl2": ModelBlob(policy="dl2", version="v7", weights=b"garbage!")})
    reason = _fallback_reason(Pipeline.build(PROFILE, REGISTRY, models))
    assert "model version 'v7' did not load" in reason


def test_no_model_falls_back_to_drf() -> None:
    profile = PROFILE.model_copy(
        update={
            "scaling": PROFILE.scaling.model_copy(update={"params": {"use_shipped_model": False}})
        }
    )
    reason = _fallback_reason(Pipeline.build(profile, REGISTRY))
    assert "no DL2 model version is active" in reason


def test_a_masked_action_falls_back_to_drf() -> None:
    policy = Dl2Scaling.with_model(_PicksMasked.initial(CONFIG))
    assert "masked" in _fallback_reason(_pipeline(policy))


def test_non_finite_output_falls_back_to_drf() -> None:
    model = Dl2Model.initial(CONFIG)
    with torch.no_grad():
        model.network.output.bias.fill_(float("nan"))
    assert "non-finite" in _fallback_reason(_pipeline(Dl2Scaling.with_model(model)))


def test_exceeding_the_latency_budget_falls_back_to_drf() -> None:
    policy = Dl2Scaling.with_model(
        Dl2Model.initial(CONFIG), params=Dl2Params(latency_budget_ms=0, use_shipped_model=False)
    )
    assert "over the budget of 0 ms" in _fallback_reason(_pipeline(policy))


def test_without_a_job_action_the_model_is_not_asked() -> None:
    snapshot = snap([node("n0")], [job("rigid", workers=2), running("r", {"n0": (4,)})])
    policy = Dl2Scaling.with_model(
        _PicksMasked.initial(CONFIG), params=Dl2Params(latency_budget_ms=0)
    )
    results = policy.scale(ctx(snapshot), list(snapshot.jobs))
    assert [(r.workers, r.ps) for r in results] == [(2, 0), (1, 0)]
    assert snapshot.jobs_by_id["r"].state is JobState.RUNNING
