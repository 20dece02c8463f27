"""Behaviour of the admission policies on small hand-made snapshots."""

from __future__ import annotations

from policies.decision import AdmissionResult, JobStatus, Verdict
from policies.model import JobState, Pool, Snapshot, Tenant
from policies.registry import build_registry
from tests.policies.builders import ctx, decide, job, node, reasons, running, snap, statuses

REGISTRY = build_registry()


def judge(policy: str, snapshot: Snapshot, **params: object) -> dict[str, AdmissionResult]:
    """Verdicts of `policy` on the snapshot's pending jobs not yet admitted, by job id."""
    jobs = [j for j in snapshot.jobs if j.state is JobState.PENDING and not j.admitted]
    results = REGISTRY.admission(policy, params).admit(ctx(snapshot), jobs)
    return {r.job_id: r for r in results}


def test_accept_all_admits_every_job() -> None:
    snapshot = snap([node("n0")], [job("a", admitted=False), job("b", admitted=False, workers=64)])
    verdicts = judge("accept_all", snapshot)
    assert {v.verdict for v in verdicts.values()} == {Verdict.ADMIT}


def test_quota_defers_job_over_tenant_quota() -> None:
    snapshot = snap(
        [node("n0")],
        [
            running("held", {"n0": (0, 1, 2, 3, 4, 5)}, tenant="t"),
            job("new", tenant="t", workers=4, admitted=False),
        ],
        tenants=(Tenant(id="t", gpu_quota=8),),
    )
    verdict = judge("quota", snapshot)["new"]
    assert verdict.verdict is Verdict.DEFER
    assert "6 of its 8-GPU quota" in verdict.reason
    assert "needs 4" in verdict.reason


def test_quota_rejects_a_job_larger_than_the_whole_quota() -> None:
    snapshot = snap(
        [node("n0", gpus=16)],
        [job("huge", tenant="t", workers=10, admitted=False)],
        tenants=(Tenant(id="t", gpu_quota=8),),
    )
    verdict = judge("quota", snapshot)["huge"]
    assert verdict.verdict is Verdict.REJECT
    assert "10 GPUs" in verdict.reason
    assert "quota of 8" in verdict.reason


def test_quota_counts_jobs_admitted_earlier_in_the_same_call() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("first", tenant="t", workers=4, submit_time=1, admitted=False),
            job("second", tenant="t", workers=4, submit_time=2, admitted=False),
        ],
        tenants=(Tenant(id="t", gpu_quota=6),),
    )
    verdicts = judge("quota", snapshot)
    assert verdicts["first"].verdict is Verdict.ADMIT
    assert verdicts["second"].verdict is Verdict.DEFER


def test_quota_counts_admitted_jobs_that_still_wait() -> None:
    snapshot = snap(
        [node("n0")],
        [
            job("queued", tenant="t", workers=4, admitted=True),
            job("new", tenant="t", workers=6, admitted=False),
        ],
        tenants=(Tenant(id="t", gpu_quota=8),),
    )
    verdict = judge("quota", snapshot)["new"]
    assert verdict.verdict is Verdict.DEFER
    assert "4 admitted and waiting" in verdict.reason


def test_quota_admits_tenants_without_a_quota() -> None:
    snapshot = snap(
        [node("n0")],
        [job("free", tenant="open", workers=8, admitted=False)],
        tenants=(Tenant(id="open"), Tenant(id="t", gpu_quota=0)),
    )
    assert judge("quota", snapshot)["free"].verdict is Verdict.ADMIT


def test_quota_measures_an_elastic_job_at_its_minimum() -> None:
    snapshot = snap(
        [node("n0")],
        [job("elastic", tenant="t", workers=8, min_workers=2, max_workers=8, admitted=False)],
        tenants=(Tenant(id="t", gpu_quota=4),),
    )
    assert judge("quota", snapshot)["elastic"].verdict is Verdict.ADMIT


def test_quota_profile_explains_a_deferral_as_pending() -> None:
    snapshot = snap(
        [node("n0")],
        [
            running("held", {"n0": (0, 1, 2, 3)}, tenant="t"),
            job("new", tenant="t", workers=2, admitted=False),
        ],
        tenants=(Tenant(id="t", gpu_quota=4),),
    )
    decision = decide(snapshot, "quota")
    assert statuses(decision)["new"] is JobStatus.PENDING
    assert reasons(decision)["new"].startswith("admission deferred: ")
    assert "new" not in decision.ordering
    assert [note.job_id for note in decision.pending] == ["new"]


def test_load_threshold_admits_until_the_load_reaches_the_threshold() -> None:
    snapshot = snap(
        [node("n0")],
        [
            running("full", {"n0": tuple(range(8))}),
            job("first", workers=4, submit_time=1, admitted=False),
            job("second", workers=4, submit_time=2, admitted=False),
        ],
    )
    verdicts = judge("load_threshold", snapshot)
    assert verdicts["first"].verdict is Verdict.ADMIT
    assert verdicts["second"].verdict is Verdict.DEFER
    assert "12 committed / 8 schedulable GPUs = 1.50" in verdicts["second"].reason


def test_load_threshold_follows_its_parameter() -> None:
    snapshot = snap(
        [node("n0")],
        [running("half", {"n0": (0, 1, 2, 3)}), job("new", workers=1, admitted=False)],
    )
    assert judge("load_threshold", snapshot, threshold=0.5)["new"].verdict is Verdict.DEFER
    assert judge("load_threshold", snapshot, threshold=0.6)["new"].verdict is Verdict.ADMIT


def test_load_threshold_rejects_a_job_larger_than_the_training_side() -> None:
    snapshot = snap(
        [node("n0"), node("inference", pool=Pool.INFERENCE)],
        [job("huge", workers=16, admitted=False)],
    )
    verdict = judge("load_threshold", snapshot)["huge"]
    assert verdict.verdict is Verdict.REJECT
    assert "has 8" in verdict.reason


def test_load_threshold_counts_loaned_and_unhealthy_nodes_before_rejecting() -> None:
    snapshot = snap(
        [
            node("n0"),
            node("sick", healthy=False),
            node("lent", pool=Pool.INFERENCE, loaned=True),
        ],
        [job("big", workers=24, admitted=False)],
    )
    assert judge("load_threshold", snapshot)["big"].verdict is Verdict.ADMIT


def test_load_threshold_defers_while_no_training_gpu_is_schedulable() -> None:
    snapshot = snap([node("sick", healthy=False)], [job("any", workers=1, admitted=False)])
    verdict = judge("load_threshold", snapshot)["any"]
    assert verdict.verdict is Verdict.DEFER
    assert "no training GPU" in verdict.reason
