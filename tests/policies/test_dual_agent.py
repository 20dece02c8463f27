"""The dual agent: equivariant ordering, the RWGP kernel and posterior, feedback, fallbacks."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from msgspec.structs import replace as replace_struct

from policies.engine import Pipeline
from policies.learned import weights
from policies.learned.dual_agent.features import (
    CLUSTER_FEATURES,
    JOB_FEATURES,
    cluster_features,
    job_features,
)
from policies.learned.dual_agent.gp import (
    GpHyper,
    MachineGp,
    MachineObservations,
    graph_parts,
    inputs,
    posterior,
)
from policies.learned.dual_agent.network import SCORE_DECIMALS, DualAgentModel
from policies.learned.models import ModelBlob, ModelLoadError, StaticModels
from policies.model import Node, Snapshot, ThroughputObservation, Topology
from policies.placement.rwgp import PATIENCE_MAX_WAIT_S, STATE_KEY, learn_from, observations_of
from policies.profiles import load_profiles
from policies.registry import build_registry
from tests.policies.builders import job, node, running, snap
from tests.policies.checks import assert_valid_decision

PRICES = {"V100": 3.06, "P100": 1.46, "K80": 0.45}


def hetero_nodes(per_type: int = 3) -> list[Node]:
    return [
        node(
            f"{gpu.lower()}-{i}",
            gpus=4,
            gpu_type=gpu,
            price_per_gpu_hour=price,
            topology={"rack": f"{gpu.lower()}-rack"},
        )
        for gpu, price in PRICES.items()
        for i in range(per_type)
    ]


def hetero_snapshot() -> Snapshot:
    # K80 off the shipped patience (0.3), so a posterior a hair below the prior does not
    # turn a K80 start into a wait.
    speeds = {"V100": 1.0, "P100": 0.6, "K80": 0.35}
    jobs = [
        job(
            f"j{i}",
            workers=1,
            gpus_per_worker=2,
            submit_time=float(i),
            model="resnet50",
            gpu_type_speed=speeds,
            attained_service_gpu_s=100.0 * i,
        )
        for i in range(6)
    ]
    jobs.append(running("r0", {"v100-0": (0, 1)}, model="lm", gpu_type_speed=speeds))
    return snap(hetero_nodes(), jobs, now=100.0)


def dual_agent_pipeline(models: StaticModels | None = None) -> Pipeline:
    registry = build_registry()
    return Pipeline.build(load_profiles(registry)["dual-agent"], registry, models)


# -- the ordering agent -----------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 5, 40])
def test_permuting_the_jobs_permutes_the_ordering_scores(jobs: int) -> None:
    model = DualAgentModel.initial(seed=3)
    rng = np.random.default_rng(jobs)
    features = rng.normal(size=(jobs, JOB_FEATURES)).astype(np.float32)
    cluster = rng.normal(size=CLUSTER_FEATURES).astype(np.float32)
    permutation = rng.permutation(jobs)

    scores = model.scores_numpy(features, cluster)
    permuted = model.scores_numpy(features[permutation], cluster)

    np.testing.assert_allclose(permuted, scores[permutation], rtol=1e-5, atol=1e-6)


def test_a_job_scores_the_same_to_the_last_bit_wherever_it_sits_in_the_batch() -> None:
    # Matrix kernels treat a block's tail rows differently from its body; in float32
    # that put equal jobs a few ulps apart, in an order that depended on the processor.
    model = DualAgentModel.initial(seed=3)
    rng = np.random.default_rng(11)
    features = rng.normal(size=(37, JOB_FEATURES)).astype(np.float32)
    features[[5, 16, 33, 36]] = features[0]
    cluster = rng.normal(size=CLUSTER_FEATURES).astype(np.float32)

    scores = model.scores_numpy(features, cluster)

    assert len({float(scores[i]) for i in (0, 5, 16, 33, 36)}) == 1
    np.testing.assert_array_equal(scores, np.round(scores, SCORE_DECIMALS))


def test_the_served_numpy_scores_equal_the_torch_module() -> None:
    model = DualAgentModel.initial(seed=1)
    snapshot = hetero_snapshot()
    features = job_features(snapshot, snapshot.jobs)
    cluster = cluster_features(snapshot, snapshot.jobs)

    with torch.no_grad():
        reference = model.scores(torch.from_numpy(features), torch.from_numpy(cluster)).numpy()

    np.testing.assert_allclose(model.scores_numpy(features, cluster), reference, rtol=1e-5)


def test_a_saved_model_loads_with_identical_scores_and_gp_hyperparameters() -> None:
    model = DualAgentModel.initial(seed=5)
    loaded = DualAgentModel.from_bytes(model.to_bytes())
    snapshot = hetero_snapshot()
    features = job_features(snapshot, snapshot.jobs)
    cluster = cluster_features(snapshot, snapshot.jobs)

    assert loaded.to_bytes() == model.to_bytes()
    np.testing.assert_array_equal(
        loaded.scores_numpy(features, cluster), model.scores_numpy(features, cluster)
    )
    with pytest.raises(ModelLoadError):
        DualAgentModel.from_bytes(b"not a model")


# -- RWGP -----------------------------------------------------------------------------------------


def random_machines(rng: np.random.Generator, count: int) -> list[Node]:
    types = ["V100", "P100", "K80", "T4"]
    return [
        Node(
            id=f"m{i}",
            gpu_type=types[int(rng.integers(len(types)))],
            gpus=int(rng.choice([1, 2, 4, 8])),
            price_per_gpu_hour=float(rng.uniform(0.1, 5.0)),
            topology=Topology(rack=f"r{int(rng.integers(4))}" if rng.random() < 0.8 else ""),
        )
        for i in range(count)
    ]


@pytest.mark.parametrize("seed", range(6))
def test_the_gp_kernel_is_positive_semidefinite_on_random_machine_graphs(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = random_machines(rng, int(rng.integers(2, 40)))
    observed = MachineObservations(
        {n.id: float(rng.normal(0, 0.1)) for n in nodes if rng.random() < 0.5}, {}
    )
    hyper = GpHyper()
    with torch.no_grad():
        for parameter in hyper.parameters():
            parameter.copy_(torch.from_numpy(rng.normal(0, 2, parameter.shape)))
    gp = MachineGp(None, None, _likelihood(), graph_parts(nodes, observed)).double()
    gp.set_hyper({k: v.double() for k, v in hyper.positive().items()})
    x = inputs(nodes)

    with torch.no_grad():
        matrix = gp.covar_module(x).to_dense()
    eigenvalues = torch.linalg.eigvalsh(0.5 * (matrix + matrix.T))

    assert float(eigenvalues.min()) >= -1e-8 * max(1.0, float(eigenvalues.max()))


def _likelihood() -> object:
    import gpytorch  # noqa: PLC0415

    return gpytorch.likelihoods.GaussianLikelihood()


def test_the_posterior_concentrates_on_a_machine_after_repeated_feedback() -> None:
    nodes = hetero_nodes()
    hyper = GpHyper().positive()
    target = "p100-1"
    state = None
    stds = []
    rng = np.random.default_rng(0)
    for _ in range(5):
        seen = [
            ThroughputObservation(
                node_id=target, job_id="j", relative_speed=1.2 * math.exp(rng.normal(0, 0.1))
            )
            for _ in range(10)
        ]
        state = learn_from(state, seen)
        value = posterior(nodes, observations_of(state), hyper)
        mean, std = value.of(target)
        stds.append(std)

    prior_std = posterior(nodes, MachineObservations({}, {}), hyper).of(target)[1]
    assert stds == sorted(stds, reverse=True)
    assert stds[-1] < prior_std / 3
    assert mean == pytest.approx(math.log(1.2), abs=0.05)


def test_machines_the_gp_cannot_tell_apart_get_identical_posteriors() -> None:
    """Unobserved machines of one type and rack are the same to the GP: their posteriors
    must be equal bit for bit, so the placement's own tie-break picks between them and not
    the rounding of the CPU's linear algebra (which differed between them before)."""
    nodes = hetero_nodes(per_type=9)
    hyper = GpHyper().positive()
    rng = np.random.default_rng(3)
    state = None
    observed = ("p100-0", "v100-1", "k80-2", "p100-3")
    for target in observed:
        seen = [
            ThroughputObservation(
                node_id=target, job_id="j", relative_speed=math.exp(rng.normal(0, 0.1))
            )
            for _ in range(7)
        ]
        state = learn_from(state, seen)
    value = posterior(nodes, observations_of(state), hyper)
    for gpu_type in PRICES:
        twins = [n.id for n in nodes if n.gpu_type == gpu_type and n.id not in observed]
        assert len({value.of(machine) for machine in twins}) == 1, gpu_type
    # An observed machine is not its unobserved rack-mates' twin.
    assert value.of("p100-0") != value.of("p100-1")


def test_unreadable_gp_state_is_dropped_not_an_error() -> None:
    assert observations_of({"version": 99, "nodes": {"a": [1, 0.1]}}).count == {}
    assert observations_of({"version": 1, "nodes": {"a": "junk", "b": [2, 0.1]}}).count == {
        "b": 2.0
    }


def test_a_decision_with_a_feedback_updated_gp_differs_only_in_placement() -> None:
    snapshot = hetero_snapshot()
    pipeline = dual_agent_pipeline()
    before = pipeline.run(snapshot, state={}, decision_id="d", seed=0).decision
    chosen = {a.node_id for entry in before.placement for a in entry.assignments}
    # Every machine the first decision used turns out slow; the others as the table says.
    seen = [
        ThroughputObservation(
            node_id=n.id, job_id="probe", relative_speed=0.4 if n.id in chosen else 1.0
        )
        for n in snapshot.nodes
        for _ in range(20)
    ]
    state = {STATE_KEY: learn_from(None, seen)}

    after = pipeline.run(snapshot, state=state, decision_id="d", seed=0).decision

    assert_valid_decision(snapshot, after)
    assert after.placement != before.placement
    assert replace_struct(after, placement=(), explanations=()) == replace_struct(
        before, placement=(), explanations=()
    )
    details = [entry.details for entry in after.placement if entry.details]
    assert details
    assert {"predicted_speed", "speed_std", "price_per_gpu_hour"} <= set(details[0])


@pytest.mark.parametrize(
    "weights", [b"corrupt bytes", DualAgentModel.initial().to_bytes()[:-40]], ids=["junk", "cut"]
)
def test_a_corrupt_model_falls_back_to_tiresias_with_consolidated_placement(
    weights: bytes,
) -> None:
    snapshot = hetero_snapshot()
    models = StaticModels({"dual-agent": ModelBlob("dual-agent", "broken", weights)})

    decision = dual_agent_pipeline(models).decide(snapshot, seed=0)

    assert_valid_decision(snapshot, decision)
    assert decision.fallback is not None
    assert decision.fallback.policy == "tiresias, consolidated"
    assert "did not load" in decision.fallback.reason
    assert decision.policies["ordering"].name == "tiresias"
    assert decision.policies["placement"].name == "consolidated"


def test_the_hetero_greedy_baseline_takes_the_most_speed_per_dollar() -> None:
    # P100 at 0.6 of a V100 for half the price beats both V100 and K80 (0.3 at 0.45 $).
    snapshot = snap(
        hetero_nodes(1),
        [job("a", gpus_per_worker=2, gpu_type_speed={"V100": 1.0, "P100": 0.6, "K80": 0.1})],
    )
    registry = build_registry()
    decision = Pipeline.build(load_profiles(registry)["hetero-greedy"], registry).decide(snapshot)

    assert [a.node_id for a in decision.placement[0].assignments] == ["p100-0"]


def test_a_job_that_one_gpu_type_can_hold_does_not_span_types() -> None:
    # 6 GPUs. Filling by speed per dollar would take the one P100 machine (4 GPUs)
    # and top it up on a V100: P100 speed at partly V100 prices. Two V100s hold it.
    nodes = [n for n in hetero_nodes(2) if n.id != "p100-1"]
    speeds = {"V100": 1.0, "P100": 0.6, "K80": 0.1}
    snapshot = snap(nodes, [job("a", workers=6, gpus_per_worker=1, gpu_type_speed=speeds)])
    registry = build_registry()
    decision = Pipeline.build(load_profiles(registry)["hetero-greedy"], registry).decide(snapshot)

    assert {a.node_id for a in decision.placement[0].assignments} == {"v100-0", "v100-1"}


def test_a_slow_model_falls_back_and_says_so() -> None:
    snapshot = hetero_snapshot()
    registry = build_registry()
    profile = load_profiles(registry)["dual-agent"]
    slow = profile.model_copy(
        update={
            "ordering": profile.ordering.model_copy(update={"params": {"latency_budget_ms": 0}}),
        }
    )

    decision = Pipeline.build(slow, registry).decide(snapshot, seed=0)

    assert_valid_decision(snapshot, decision)
    assert decision.fallback is not None
    assert decision.fallback.policy == "tiresias"
    assert "over the budget of 0 ms" in decision.fallback.reason


def _only_k80_free(model_speed_on_k80: float, now: float) -> Snapshot:
    """V100 and P100 machines full; a job whose K80 speed is `model_speed_on_k80` of a V100."""
    nodes = hetero_nodes(1)
    busy = [running(f"busy-{n.id}", {n.id: (0, 1, 2, 3)}) for n in nodes if n.gpu_type != "K80"]
    speeds = {"V100": 1.0, "P100": 0.7, "K80": model_speed_on_k80}
    return snap(nodes, [job("a", gpu_type_speed=speeds), *busy], now=now)


def _initial_model_pipeline() -> Pipeline:
    """The dual agent serving fresh weights: patience at its initial 0.2."""
    blob = ModelBlob("dual-agent", "initial", DualAgentModel.initial().to_bytes())
    return dual_agent_pipeline(StaticModels({"dual-agent": blob}))


def test_a_job_waits_rather_than_start_far_slower_than_its_best_gpu_type() -> None:
    snapshot = _only_k80_free(0.1, now=60.0)

    decision = _initial_model_pipeline().decide(snapshot, seed=0)

    assert_valid_decision(snapshot, decision)
    assert decision.fallback is None
    assert not [entry for entry in decision.placement if entry.job_id == "a"]
    (note,) = [n for n in decision.pending if n.job_id == "a"]
    assert "waits for a faster machine" in note.reason


def test_a_job_takes_a_slower_gpu_type_within_its_patience_or_after_the_longest_wait() -> None:
    pipeline = _initial_model_pipeline()
    within = _only_k80_free(0.3, now=60.0)
    waited = _only_k80_free(0.1, now=PATIENCE_MAX_WAIT_S + 1.0)

    for snapshot in (within, waited):
        decision = pipeline.decide(snapshot, seed=0)
        assert_valid_decision(snapshot, decision)
        placed = [e for e in decision.placement if e.job_id == "a"]
        assert [a.node_id for entry in placed for a in entry.assignments] == ["k80-0"]


def test_a_model_saved_before_the_patience_existed_loads_and_never_waits() -> None:
    model = DualAgentModel.initial()
    tensors = {k: v for k, v in model._tensors().items() if "patience" not in k}
    older = weights.dump(tensors, model.meta())

    loaded = DualAgentModel.from_bytes(older)

    assert float(loaded.placement.patience.detach()[0]) < 1e-9
    assert torch.equal(loaded.placement.risk, model.placement.risk)
