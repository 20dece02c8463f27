"""Behaviour of the scaling policies, alone and through the engine."""

from __future__ import annotations

from policies.decision import JobStatus, ScalingResult
from policies.model import JobState, Snapshot, Tenant
from policies.registry import build_registry
from tests.policies.builders import (
    choice,
    ctx,
    decide,
    full_cluster_with_a_short_job_waiting,
    job,
    node,
    running,
    snap,
    statuses,
)

REGISTRY = build_registry()


def scale(
    policy: str, snapshot: Snapshot, params: dict[str, object] | None = None
) -> dict[str, ScalingResult]:
    """Scaling of the snapshot's jobs, given in snapshot order as the service order."""
    results = REGISTRY.scaling(policy, params).scale(ctx(snapshot), list(snapshot.jobs))
    return {r.job_id: r for r in results}


def workers(results: dict[str, ScalingResult]) -> dict[str, int]:
    return {job_id: r.workers for job_id, r in results.items()}


def test_as_requested_keeps_running_jobs_at_what_they_hold() -> None:
    snapshot = snap(
        [node("n0")],
        [
            running("elastic", {"n0": (0, 1)}, workers=4, min_workers=1, max_workers=8),
            job("rigid", workers=3, ps=2),
        ],
    )
    results = scale("as_requested", snapshot)
    assert workers(results) == {"elastic": 2, "rigid": 3}
    assert results["rigid"].ps == 2


def test_drf_equalises_dominant_shares_across_tenants() -> None:
    snapshot = snap(
        [node("n0", gpus=16)],
        [
            job("a1", tenant="a", workers=1, min_workers=1, max_workers=16),
            job("b1", tenant="b", workers=1, min_workers=1, max_workers=16),
        ],
    )
    assert workers(scale("drf", snapshot)) == {"a1": 8, "b1": 8}


def test_drf_weights_shares_by_tenant_weight() -> None:
    snapshot = snap(
        [node("n0", gpus=12)],
        [
            job("a1", tenant="a", workers=1, min_workers=1, max_workers=16),
            job("b1", tenant="b", workers=1, min_workers=1, max_workers=16),
        ],
        tenants=(Tenant(id="a", weight=2.0), Tenant(id="b", weight=1.0)),
    )
    results = scale("drf", snapshot)
    assert workers(results) == {"a1": 8, "b1": 4}
    assert "weight 2" in results["a1"].reason


def test_drf_equalises_each_tenants_dominant_resource() -> None:
    # The worked example of the DRF paper (§4): 9 CPUs and 18 GB; tenant a's tasks
    # need <1 CPU, 4 GB> (memory-dominant), tenant b's <3 CPUs, 1 GB> (CPU-dominant).
    # DRF gives a three tasks and b two, both at a dominant share of 2/3. GPUs are
    # plentiful here so that they are nobody's dominant resource.
    snapshot = snap(
        [node("n0", gpus=64, cpus=9, memory_gb=18)],
        [
            job("a1", tenant="a", workers=1, min_workers=1, max_workers=10,
                cpus_per_worker=1, memory_gb_per_worker=4),
            job("b1", tenant="b", workers=1, min_workers=1, max_workers=10,
                cpus_per_worker=3, memory_gb_per_worker=1),
        ],
    )  # fmt: skip
    results = scale("drf", snapshot)
    assert workers(results) == {"a1": 3, "b1": 2}
    assert "0.667 of memory" in results["a1"].reason
    assert "0.667 of CPUs" in results["b1"].reason


def test_drf_starts_the_waiting_jobs_of_the_poorest_tenant_first() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("a1", tenant="a", workers=4, submit_time=1),
            job("a2", tenant="a", workers=4, submit_time=2),
            job("a3", tenant="a", workers=4, submit_time=3),
            job("b1", tenant="b", workers=4, submit_time=4),
        ],
    )
    decision = decide(snapshot, "drf")
    status = statuses(decision)
    assert status["a1"] is JobStatus.STARTED
    assert status["b1"] is JobStatus.STARTED
    assert status["a2"] is JobStatus.PENDING
    scaling = {r.job_id: r for r in decision.scaling}
    assert scaling["a2"].workers == 0
    assert "DRF: no capacity left at its minimum of 4 workers" in scaling["a2"].reason


def test_drf_keeps_running_jobs_at_what_they_hold() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("waiting", tenant="poor", workers=2, min_workers=1, max_workers=8),
            running("rich", {"n0": (0, 1, 2, 3, 4, 5)}, tenant="rich"),
        ],
    )
    assert workers(scale("drf", snapshot)) == {"waiting": 2, "rich": 6}


def test_drf_and_optimus_not_keeping_running_jobs_reallocate_them_from_their_minimum() -> None:
    # One tenant, eight GPUs: a running elastic job holds all of them while another waits.
    snapshot = snap(
        [node("n0")],
        [
            running("holder", {"n0": tuple(range(8))}, workers=8, min_workers=1,
                    max_workers=8, estimated_duration_s=10_000),
            job("waiting", workers=2, min_workers=1, max_workers=8,
                estimated_duration_s=10_000),
        ],
    )  # fmt: skip
    for policy in ("drf", "optimus"):
        kept = workers(scale(policy, snapshot))
        assert kept == {"holder": 8, "waiting": 0}, policy
        again = workers(scale(policy, snapshot, {"keep_running": True}))
        assert again == kept, policy
        whole = workers(scale(policy, snapshot, {"keep_running": False}))
        # Both start from one worker and the rest is shared out: the waiting job starts.
        assert whole["waiting"] >= 1, policy
        assert whole["holder"] + whole["waiting"] == 8, policy
    # DRF evens out the two jobs' shares.
    assert workers(scale("drf", snapshot, {"keep_running": False})) == {"holder": 4, "waiting": 4}


def test_drf_grows_only_to_counts_the_job_accepts() -> None:
    snapshot = snap(
        [node("n0", gpus=16)],
        [
            job("pow2", tenant="a", workers=2, min_workers=1, max_workers=12,
                scaling_rule="power_of_two"),
            job("b1", tenant="b", workers=2),
        ],
    )  # fmt: skip
    results = workers(scale("drf", snapshot))
    assert results == {"pow2": 8, "b1": 2}


def test_optimus_gives_workers_where_marginal_gain_is_highest() -> None:
    # "scales" speeds up linearly; "saturates" barely gains past one worker. Each
    # step goes to the bigger cut in remaining time per GPU: 5 and 3 workers.
    snapshot = snap(
        [node("n0")],
        [
            job("scales", workers=1, min_workers=1, max_workers=8, estimated_duration_s=10_000),
            job("saturates", workers=1, min_workers=1, max_workers=8,
                estimated_duration_s=10_000, speedup={1: 1.0, 2: 1.1, 4: 1.2, 8: 1.3}),
        ],
    )  # fmt: skip
    results = scale("optimus", snapshot)
    assert workers(results) == {"scales": 5, "saturates": 3}
    assert "saved 500.0 s of remaining time per added GPU" in results["scales"].reason


def test_optimus_stops_when_no_step_saves_time() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("flat", workers=1, min_workers=1, max_workers=8, estimated_duration_s=1000,
                speedup={1: 1.0, 2: 2.0, 4: 2.0}),
        ],
    )  # fmt: skip
    assert workers(scale("optimus", snapshot)) == {"flat": 2}


def test_optimus_keeps_jobs_of_unknown_duration_at_their_minimum() -> None:
    snapshot = snap([node("n0")], [job("mystery", workers=4, min_workers=2, max_workers=8)])
    result = scale("optimus", snapshot)["mystery"]
    assert result.workers == 2
    assert "remaining time unknown" in result.reason


def test_optimus_keeps_parameter_servers_as_requested() -> None:
    snapshot = snap([node("n0")], [job("ps-job", workers=2, ps=3, estimated_duration_s=100)])
    assert scale("optimus", snapshot)["ps-job"].ps == 3


def test_optimus_lets_a_later_job_start_when_an_earlier_minimum_does_not_fit() -> None:
    snapshot = snap(
        [node("n0")],
        [
            running("holder", {"n0": (0, 1, 2, 3, 4, 5)}, estimated_duration_s=100),
            job("too-big", workers=4, estimated_duration_s=100),
            job("fits", workers=2, estimated_duration_s=100),
        ],
    )
    results = scale("optimus", snapshot)
    assert workers(results) == {"holder": 6, "too-big": 0, "fits": 2}
    assert "no capacity left at its minimum of 4 workers" in results["too-big"].reason


def test_scaling_gives_no_workers_to_a_job_stranded_on_an_unhealthy_node() -> None:
    snapshot = snap(
        [node("n0"), node("sick", healthy=False)],
        [running("stranded", {"sick": (0, 1)}), job("next", workers=8)],
    )
    for policy in ("drf", "optimus"):
        results = scale(policy, snapshot)
        assert results["stranded"].workers == 0, policy
        assert results["next"].workers == 8, policy
        assert snapshot.jobs_by_id["stranded"].state is JobState.RUNNING


def test_a_waiting_job_gets_its_minimum_over_a_full_pool_only_when_asked() -> None:
    snapshot = full_cluster_with_a_short_job_waiting()
    for policy in ("drf", "optimus"):
        assert workers(scale(policy, snapshot)) == {"long": 8, "short": 0}, policy
        asked = scale(policy, snapshot, {"minimum_when_full": True})
        # Its minimum, no step beyond it, and the running job untouched.
        assert workers(asked) == {"long": 8, "short": 2}, policy
        assert "with 0 GPUs left in the pool" in asked["short"].reason, policy
        assert "only if the ordering stops running jobs for it" in asked["short"].reason


def test_srtf_preempts_for_a_shorter_job_only_when_scaling_gives_it_its_minimum() -> None:
    snapshot = full_cluster_with_a_short_job_waiting()
    for policy in ("drf", "optimus"):
        pool_bound = statuses(decide(snapshot, "optimus", scaling=choice(policy)))
        assert pool_bound == {"long": JobStatus.RUNNING, "short": JobStatus.PENDING}, policy
        over_full = choice(policy, minimum_when_full=True)
        status = statuses(decide(snapshot, "optimus", scaling=over_full))
        assert status == {"long": JobStatus.PREEMPTED, "short": JobStatus.STARTED}, policy


def test_a_job_given_its_minimum_over_a_full_pool_is_told_which_resource_it_lacks() -> None:
    # GPUs are left, CPUs are not: the reason names the CPUs.
    snapshot = snap(
        [node("n0", cpus=16)],
        [
            running("long", {"n0": (0, 1, 2, 3)}, workers=4, cpus_per_worker=4,
                    estimated_duration_s=50_000),
            job("short", workers=4, min_workers=2, max_workers=8, cpus_per_worker=4,
                estimated_duration_s=600, submit_time=10),
        ],
    )  # fmt: skip
    for policy in ("drf", "optimus"):
        asked = scale(policy, snapshot, {"minimum_when_full": True})
        assert workers(asked) == {"long": 4, "short": 2}, policy
        reason = asked["short"].reason
        assert "its minimum of 2 workers needs 8 CPUs with 0 CPUs left in the pool" in reason
        assert "GPU" not in reason, policy


def test_jobs_alike_in_gpus_but_not_in_cpus_are_told_their_own_shortage() -> None:
    # Two GPUs and four CPUs left: "a" lacks GPUs only, "b" GPUs and CPUs.
    snapshot = snap(
        [node("n0", cpus=16)],
        [
            running("long", {"n0": tuple(range(6))}, workers=6, cpus_per_worker=2,
                    estimated_duration_s=50_000),
            job("a", workers=4, min_workers=4, max_workers=8, cpus_per_worker=1,
                estimated_duration_s=600, submit_time=10),
            job("b", workers=4, min_workers=4, max_workers=8, cpus_per_worker=2,
                estimated_duration_s=600, submit_time=20),
        ],
    )  # fmt: skip
    for policy in ("drf", "optimus"):
        asked = scale(policy, snapshot, {"minimum_when_full": True})
        assert "needs 4 GPUs with 2 GPUs left in the pool" in asked["a"].reason, policy
        assert (
            "needs 4 GPUs with 2 GPUs left, 8 CPUs with 4 CPUs left in the pool"
            in asked["b"].reason
        ), policy


def test_a_job_given_its_minimum_over_a_full_pool_takes_no_step_of_what_is_left() -> None:
    # One GPU is left: too little for the short job's minimum of two, enough for a step.
    snapshot = snap(
        [node("n0")],
        [
            running("long", {"n0": tuple(range(7))}, workers=7, estimated_duration_s=50_000),
            job("short", workers=4, min_workers=2, max_workers=8, estimated_duration_s=600,
                submit_time=10),
        ],
    )  # fmt: skip
    for policy in ("drf", "optimus"):
        asked = scale(policy, snapshot, {"minimum_when_full": True})
        assert workers(asked) == {"long": 7, "short": 2}, policy
        assert "with 1 GPU left in the pool" in asked["short"].reason, policy
