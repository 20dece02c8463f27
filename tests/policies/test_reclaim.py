"""Reclaim policies and `run_reclaim`: which loaned servers go back, and what that costs."""

from __future__ import annotations

from typing import ClassVar

import pytest
from pydantic import BaseModel

from policies.common.reclaim import ReclaimRequestError, answer_problems, run_reclaim
from policies.decision import Stage
from policies.engine import PolicyFault
from policies.model import Node, Pool, Snapshot, convert
from policies.protocols import Context, NoParams
from policies.reclaim_models import ReclaimRequest, ReclaimResult
from policies.registry import build_registry
from tests.policies.builders import ctx, node, running, snap
from tests.policies.checks import assert_valid_reclaim

REGISTRY = build_registry()
RECLAIM_POLICIES = [spec.name for spec in REGISTRY.specs(Stage.RECLAIM)]


def lent(node_id: str, gpus: int = 4) -> Node:
    return node(node_id, gpus, pool=Pool.INFERENCE, loaned=True)


def reclaim(snapshot: Snapshot, policy: str = "aryl", **asked: object) -> ReclaimResult:
    request = convert(asked, ReclaimRequest)
    result = run_reclaim(REGISTRY.reclaim(policy), snapshot, request, seed=1)
    assert_valid_reclaim(snapshot, request, result)
    return result


def extras_and_rigid() -> Snapshot:
    """i0 holds two extra workers of an elastic job; i1 one rigid job's only GPU."""
    return snap(
        [node("t0"), lent("i0"), lent("i1")],
        [
            running("elastic", {"t0": (0, 1, 2, 3), "i0": (0, 1)}, min_workers=4, max_workers=8),
            running("rigid", {"i1": (0,)}),
        ],
    )


def test_aryl_returns_the_server_with_only_elastic_extras_before_one_that_preempts() -> None:
    result = reclaim(extras_and_rigid(), count=1)

    assert result.servers == ("i0",)
    assert [(e.job_id, e.workers) for e in result.shrink] == [("elastic", 4)]
    assert result.shrink[0].assignments[0].node_id == "t0"
    assert result.preempt == ()
    assert result.cost == 0
    assert "shrinks 'elastic'" in result.reasons.servers["i0"]


def test_fewest_jobs_looks_only_at_job_counts_and_preempts_where_aryl_shrinks() -> None:
    result = reclaim(extras_and_rigid(), "fewest_jobs", count=1)

    # One job on each server; i1's uses fewer GPUs, and losing it preempts the job.
    assert result.servers == ("i1",)
    assert result.preempt == ("rigid",)
    assert result.cost == 1
    assert result.preempted_gpus == 1


def test_aryl_recomputes_costs_so_a_preempted_job_frees_its_other_servers() -> None:
    # a spans i0 and i1; i1 also hosts b; i2 hosts c and d, which hold fewer GPUs than a, b.
    snapshot = snap(
        [lent("i0"), lent("i1"), lent("i2")],
        [
            running("a", {"i0": (0,), "i1": (0,)}),
            running("b", {"i1": (1,)}),
            running("c", {"i2": (0,)}),
            running("d", {"i2": (1,)}),
        ],
    )

    result = reclaim(snapshot, count=2)

    # Costs at first: i0 1, i1 2, i2 2. Once i0 is back, a is gone and i1 costs 1 (b).
    assert result.servers == ("i0", "i1")
    assert sorted(result.preempt) == ["a", "b"]
    assert result.cost == 2
    assert "'a' already preempted by an earlier pick" in result.reasons.servers["i1"]


def test_aryl_sees_an_elastic_job_run_out_of_slack_as_picks_go() -> None:
    # e may lose one worker (min 3 of 4) but not two; r is a 1-GPU rigid job.
    snapshot = snap(
        [node("t0"), lent("i0"), lent("i1"), lent("i2")],
        [
            running("e", {"t0": (0, 1), "i0": (0,), "i1": (0,)}, min_workers=3, max_workers=4),
            running("r", {"i2": (0,)}),
        ],
    )

    result = reclaim(snapshot, count=2)

    # i0 and i1 each cost 0 alone; after i0, i1 would preempt e (4 GPUs), i2 only r (1).
    assert result.servers == ("i0", "i2")
    assert [(e.job_id, e.workers) for e in result.shrink] == [("e", 3)]
    assert result.preempt == ("r",)


def test_aryl_preempts_a_non_preemptible_job_only_as_a_last_resort() -> None:
    snapshot = snap(
        [lent("i0"), lent("i1")],
        [
            running("precious", {"i0": (0,)}, preemptible=False),
            running("a", {"i1": (0,)}),
            running("b", {"i1": (1,)}),
        ],
    )

    assert reclaim(snapshot, count=1).servers == ("i1",)
    unprotected = REGISTRY.reclaim("aryl", {"protect_non_preemptible": False})
    assert unprotected.reclaim(ctx(snapshot), ReclaimRequest(count=1)).servers == ("i0",)
    both = reclaim(snapshot, count=2)
    assert "non-preemptible" in both.reasons.jobs["precious"]


def test_a_shrunk_job_keeps_training_pool_gpus_and_drops_step_rule_leftovers_from_loans() -> None:
    # Power-of-two job on 8 workers: 2 on i0 (returned), 4 on t0, 2 on i1. Six are left,
    # so it runs on four, and the two it must also drop come off the other loaned server.
    snapshot = snap(
        [node("t0"), lent("i0"), lent("i1")],
        [
            running(
                "p2",
                {"i0": (0, 1), "t0": (0, 1, 2, 3), "i1": (0, 1)},
                workers=8,
                min_workers=1,
                max_workers=8,
                scaling_rule="power_of_two",
            )
        ],
    )

    result = reclaim(snapshot, node_ids=("i0",))

    (entry,) = result.shrink
    assert entry.workers == 4
    assert [(a.node_id, a.gpu_indices) for a in entry.assignments] == [("t0", (0, 1, 2, 3))]
    assert "2 more dropped for its power_of_two step rule" in result.reasons.jobs["p2"]


@pytest.mark.parametrize("policy", RECLAIM_POLICIES)
def test_reclaim_never_returns_a_server_that_is_not_loaned(policy: str) -> None:
    serving = node("serving", 4, pool=Pool.INFERENCE)
    snapshot = snap(
        [node("t0"), lent("i0"), serving, lent("i1")],
        [running("j", {"t0": (0,), "serving": (0,)}), running("k", {"i1": (0,)})],
    )

    result = reclaim(snapshot, policy, count=10)

    assert sorted(result.servers) == ["i0", "i1"]
    assert result.shortfall is not None
    assert "only 2 are loaned" in result.shortfall


@pytest.mark.parametrize("policy", RECLAIM_POLICIES)
def test_named_servers_have_the_same_consequences_under_every_policy(policy: str) -> None:
    result = reclaim(extras_and_rigid(), policy, node_ids=("i1", "i0"))

    assert result.servers == ("i1", "i0")
    assert result.preempt == ("rigid",)
    assert [(e.job_id, e.workers) for e in result.shrink] == [("elastic", 4)]
    assert result.reasons.servers["i1"].startswith("named by the caller")


def test_random_reclaim_is_seeded() -> None:
    snapshot = snap([lent(f"i{k}") for k in range(8)], [])
    policy = REGISTRY.reclaim("random")
    request = ReclaimRequest(count=3)

    draws = {policy.reclaim(ctx(snapshot, seed), request).servers for seed in range(6)}

    assert policy.reclaim(ctx(snapshot, 2), request) == policy.reclaim(ctx(snapshot, 2), request)
    assert len(draws) > 1


def test_request_naming_servers_that_are_not_loaned_is_refused_with_paths() -> None:
    with pytest.raises(ReclaimRequestError) as refused:
        run_reclaim(
            REGISTRY.reclaim("aryl"),
            extras_and_rigid(),
            ReclaimRequest(node_ids=("i0", "t0", "nowhere")),
        )

    assert [p.path for p in refused.value.problems] == ["node_ids[1]", "node_ids[2]"]


def test_request_needs_exactly_one_of_count_and_node_ids() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        ReclaimRequest()
    with pytest.raises(ValueError, match="exactly one"):
        ReclaimRequest(count=1, node_ids=("i0",))


class _Scripted:
    """A reclaim policy that returns what it is told (or raises it)."""

    name: ClassVar[str] = "scripted"
    version: ClassVar[str] = "0"
    stage: ClassVar[Stage] = Stage.RECLAIM
    summary: ClassVar[str] = "test double"
    source: ClassVar[str] = "test"
    Params: ClassVar[type[BaseModel]] = NoParams

    def __init__(self, answer: ReclaimResult | Exception) -> None:
        self.answer = answer

    def reclaim(self, ctx: Context, request: ReclaimRequest) -> ReclaimResult:
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(
    ("answer", "fault"),
    [
        (ReclaimResult(servers=("t0",), cost=0), "'t0', which is not a loaned server"),
        (ReclaimResult(servers=("i0",), cost=0), "leaves jobs with GPUs on returned servers"),
        (
            ReclaimResult(servers=("i0",), preempt=("elastic",), cost=1, preempted_gpus=6),
            "could shrink",
        ),
        (ReclaimResult(servers=("i0", "i1"), cost=0), "returns 2 servers, expected 1"),
        (RuntimeError("boom"), "raised RuntimeError: boom"),
    ],
)
def test_run_reclaim_turns_a_broken_answer_into_a_policy_fault(
    answer: ReclaimResult | Exception, fault: str
) -> None:
    with pytest.raises(PolicyFault, match="reclaim policy 'scripted'") as caught:
        run_reclaim(_Scripted(answer), extras_and_rigid(), ReclaimRequest(count=1))

    assert fault in str(caught.value)


def test_run_reclaim_falls_back_and_says_so() -> None:
    broken = _Scripted(ReclaimResult(servers=("t0",), cost=0))

    result = run_reclaim(
        broken, extras_and_rigid(), ReclaimRequest(count=1), fallback=REGISTRY.reclaim("aryl")
    )

    assert result.servers == ("i0",)
    assert result.fallback is not None
    assert result.fallback.policy == "aryl"
    assert "not a loaned server" in result.fallback.reason


def test_answer_problems_accepts_every_shipped_policys_answer_on_the_example() -> None:
    snapshot = extras_and_rigid()
    for name in RECLAIM_POLICIES:
        for count in (1, 2, 3):
            request = ReclaimRequest(count=count)
            answer = REGISTRY.reclaim(name).reclaim(ctx(snapshot), request)
            assert answer_problems(snapshot, request, answer) == [], name
