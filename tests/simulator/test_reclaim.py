"""Reclaims in the simulator go through the profile's reclaim policy (Aryl, Li et al. 2022).

When inference demand rises, the simulator asks the decider which loaned
servers go back, checks the answer as a cluster manager would and applies it:
shrunk jobs keep the GPUs the answer lists, preempted jobs are suspended, the
servers leave training.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from msgspec.structs import replace

from policies.decision import Decision, PlacementEntry
from policies.model import Assignment, Job, JobState, ScalingRule, Snapshot
from policies.reclaim_models import ReclaimRequest, ReclaimResult, ShrinkEntry
from simulator.core import InvalidDecisionError, SimOptions, Simulation, check_reclaim
from simulator.deciders import EngineDecider
from simulator.inference import InferenceOptions
from simulator.metrics import TIMING_KEYS, SimulationResult
from simulator.perf import PerfOptions
from simulator.synthetic import SyntheticSpec, generate
from simulator.workload import JobSpec, WorkloadOptions, make_jobs
from tests.simulator.helpers import cluster, group, write_series

# One 4-GPU training node and two 4-GPU inference servers.
LOANING = cluster(group(1, 4, "V100"), group(2, 4, "T4", pool="inference"), name="loaning")
TRAINING, FIRST, SECOND = (n.id for n in LOANING.build_nodes())


def _spec(index: int, job_id: str, workers: int, lo: int, hi: int) -> JobSpec:
    return JobSpec(
        index=index,
        id=job_id,
        tenant="t",
        submit_time=0.0,
        duration_s=3000.0,
        gpus_per_worker=1,
        workers=workers,
        min_workers=lo,
        max_workers=hi,
        scaling_rule=ScalingRule.POWER_OF_TWO if lo < hi else ScalingRule.LINEAR,
        ps=0,
        max_ps=None,
        family="generic",
        estimate_s=3000.0,
        utility=None,
    )


def _on(node_id: str, *gpus: int) -> Assignment:
    return Assignment(node_id=node_id, gpu_indices=gpus)


def _one_reclaim_setup(tmp_path: Path, profile: str) -> tuple[Simulation, Snapshot]:
    """Both servers lent at 0; at 600 s inference needs one back.

    The elastic job E (4 requested, 2 to 8 accepted) runs 8 workers: 4 on the
    training node, its 4 extras on the first server. The rigid one-GPU job R sits
    alone on the second. Returns the simulation and the snapshot after the reclaim.
    """
    series = write_series(tmp_path / "demand.csv", [0.0, 0.0] + [0.5] * 20 + [1.0])
    sim = Simulation(
        [_spec(0, "E", 4, 2, 8), _spec(1, "R", 1, 1, 1)],
        LOANING,
        perf=PerfOptions(machine_variation=False),
        options=SimOptions(check_snapshots=True, round_period_s=0.0),
        inference=InferenceOptions(
            series=str(series), loan_idle=True, peak_quantile=1.0, offset_s=0.0, smoothing_bins=1
        ),
        reclaimer=EngineDecider.named(profile).reclaim,
    )
    first = sim.reset()
    assert first is not None
    assert first.now == 0.0
    assert {n.id for n in first.nodes if n.loaned} == {FIRST, SECOND}
    admitted = EngineDecider.named("fifo-backfill")(first, 0, "d0")
    decision = replace(
        admitted,
        placement=(
            PlacementEntry(
                job_id="E", assignments=(_on(TRAINING, 0, 1, 2, 3), _on(FIRST, 0, 1, 2, 3))
            ),
            PlacementEntry(job_id="R", assignments=(_on(SECOND, 0),)),
        ),
        preemptions=(),
    )
    after, done = sim.step(decision)
    assert not done
    assert after is not None
    assert after.now == 600.0
    return sim, after


def test_aryl_reclaim_shrinks_the_elastic_job_whose_extras_sit_on_the_loan(tmp_path: Path) -> None:
    sim, snapshot = _one_reclaim_setup(tmp_path, "aryl")
    assert [n.id for n in snapshot.nodes if n.loaned] == [SECOND]
    jobs = snapshot.jobs_by_id
    assert jobs["E"].placement == (_on(TRAINING, 0, 1, 2, 3),)
    assert jobs["R"].placement == (_on(SECOND, 0),)
    records = {r.job_id: r for r in sim.result().jobs}
    # A shrink is a resize: the job restarts on the GPUs it keeps, and is not preempted.
    assert (records["E"].restarts, records["E"].preemptions) == (1, 0)
    assert records["R"].preemptions == 0
    metrics = sim.result().metrics
    assert (metrics["reclaims"], metrics["servers_reclaimed"]) == (1, 1)
    assert (metrics["reclaim_shrinks"], metrics["reclaim_preemptions"]) == (1, 0)
    assert metrics["preemptions"] == 0
    # E's 4 extras and R's GPU sat on loans for the first 600 s; R is still there.
    assert metrics["loaned_gpu_hours"] == pytest.approx(5 * 600 / 3600)


def test_fewest_jobs_reclaim_returns_the_other_server_and_preempts(tmp_path: Path) -> None:
    # `static` reclaims with fewest_jobs: one job on each server, fewer busy GPUs on the second.
    sim, snapshot = _one_reclaim_setup(tmp_path, "static")
    assert [n.id for n in snapshot.nodes if n.loaned] == [FIRST]
    jobs = snapshot.jobs_by_id
    assert jobs["R"].state.value == "suspended"
    assert jobs["R"].placement == ()
    assert len(jobs["E"].placement) == 2  # untouched
    metrics = sim.result().metrics
    assert (metrics["reclaim_shrinks"], metrics["reclaim_preemptions"]) == (0, 1)
    assert metrics["preemptions"] == 1


def test_a_shrink_costs_the_perf_models_restart(tmp_path: Path) -> None:
    sim, _ = _one_reclaim_setup(tmp_path, "aryl")
    job = sim._jobs["E"]
    assert job.restart_until == pytest.approx(600.0 + sim.model.restart_s("generic"))
    assert sim.model.restart_s("generic") > 0


# -- checking answers -------------------------------------------------------------------------


def _loaned_snapshot() -> Snapshot:
    nodes = tuple(
        replace(n, loaned=True) if n.id in (FIRST, SECOND) else n for n in LOANING.build_nodes()
    )
    elastic = Job(
        id="E",
        workers=4,
        min_workers=2,
        max_workers=8,
        scaling_rule=ScalingRule.POWER_OF_TWO,
        state=JobState.RUNNING,
        admitted=True,
        placement=(_on(TRAINING, 0, 1, 2, 3), _on(FIRST, 0, 1, 2, 3)),
    )
    rigid = Job(
        id="R", workers=1, state=JobState.RUNNING, admitted=True, placement=(_on(SECOND, 0),)
    )
    return Snapshot(nodes=nodes, jobs=(elastic, rigid))


def test_check_reclaim_accepts_a_shrink_off_the_returned_server() -> None:
    answer = ReclaimResult(
        servers=(FIRST,),
        shrink=(ShrinkEntry(job_id="E", workers=4, assignments=(_on(TRAINING, 0, 1, 2, 3),)),),
        cost=0.0,
    )
    assert check_reclaim(_loaned_snapshot(), ReclaimRequest(count=1), answer) == []


def test_check_reclaim_names_every_problem() -> None:
    answer = ReclaimResult(
        servers=(TRAINING, FIRST),
        # Keeps a GPU on the returned server, and 3 workers is off the power-of-two rule.
        shrink=(ShrinkEntry(job_id="E", workers=3, assignments=(_on(FIRST, 0, 1, 2),)),),
        preempt=("R",),
        cost=1.0,
    )
    problems = check_reclaim(_loaned_snapshot(), ReclaimRequest(count=1), answer)
    text = "\n".join(problems)
    assert f"node {TRAINING!r} is not loaned" in text
    assert "2 returned, 1 asked" in text
    assert "keeps GPUs on returned" in text
    assert "outside [2, 8]" in text
    assert "preempt: job 'R' has no GPU on a returned server" in text


def test_check_reclaim_refuses_a_job_left_on_a_returned_server() -> None:
    answer = ReclaimResult(servers=(SECOND,), cost=0.0)
    problems = check_reclaim(_loaned_snapshot(), ReclaimRequest(count=1), answer)
    assert problems == ["job 'R' has GPUs on a returned server and is neither shrunk nor preempted"]


def test_a_broken_reclaim_answer_stops_the_simulation(tmp_path: Path) -> None:
    def keep_everyone(snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
        loaned = [n.id for n in snapshot.nodes if n.loaned]
        return ReclaimResult(servers=tuple(loaned[: request.count or 0]), cost=0.0)

    sim = _loaning_simulation(tmp_path, reclaimer=keep_everyone)
    with pytest.raises(InvalidDecisionError, match=r"invalid reclaim answer: .*neither shrunk"):
        sim.run(EngineDecider.named("fifo-backfill"))


# -- whole runs with loaning -------------------------------------------------------------------

SMALL_LOANING = cluster(
    group(2, 4, "V100"), group(2, 4, "T4", pool="inference", rack_size=2), name="small-loaning"
)
# Servers needed over each hour, in 5-minute bins: 0, 1 or 2 of the 2, changing often.
SAWTOOTH = [0.0, 0.0, 0.0, 0.5, 1.0, 0.5, 0.0, 0.0, 1.0, 0.0, 0.5, 0.0]
LOAD = SyntheticSpec(
    jobs=40,
    arrivals_per_hour=30.0,
    gpu_mix={1: 0.5, 2: 0.25, 4: 0.25},
    median_duration_s=1500.0,
    duration_sigma=0.8,
)


def _loaning_options(tmp_path: Path) -> InferenceOptions:
    series = write_series(tmp_path / "sawtooth.csv", SAWTOOTH * 2)
    return InferenceOptions(
        series=str(series), loan_idle=True, peak_quantile=1.0, offset_s=0.0, smoothing_bins=1
    )


def _loaning_simulation(tmp_path: Path, **extra: Any) -> Simulation:
    jobs = make_jobs(generate(LOAD, seed=2), WorkloadOptions(elastic_fraction=0.5), seed=2)
    return Simulation(
        jobs,
        SMALL_LOANING,
        options=SimOptions(check_snapshots=True, round_period_s=300.0),
        inference=_loaning_options(tmp_path),
        seed=2,
        **extra,
    )


class _Spy:
    """A decider that records the reclaims it is asked, and answers with the engine's."""

    def __init__(self, profile: str) -> None:
        self.engine = EngineDecider.named(profile)
        self.reclaims: list[ReclaimResult] = []

    def __call__(self, snapshot: Snapshot, seed: int, decision_id: str) -> Decision:
        return self.engine(snapshot, seed, decision_id)

    def reclaim(self, snapshot: Snapshot, request: ReclaimRequest, seed: int) -> ReclaimResult:
        answer = self.engine.reclaim(snapshot, request, seed)
        self.reclaims.append(answer)
        return answer


def test_a_run_asks_its_deciders_reclaim_policy(tmp_path: Path) -> None:
    spy = _Spy("aryl")
    result = _loaning_simulation(tmp_path).run(spy)
    assert result.metrics["reclaims"] == len(spy.reclaims) > 0
    assert result.metrics["servers_reclaimed"] == sum(len(r.servers) for r in spy.reclaims)
    shrinks = sum(len(r.shrink) for r in spy.reclaims)
    assert result.metrics["reclaim_shrinks"] == shrinks > 0


def _conserving(result: SimulationResult) -> None:
    m = result.metrics
    assert m["jobs_completed"] + m["jobs_rejected"] == m["jobs"] == LOAD.jobs
    assert len({r.job_id for r in result.jobs}) == LOAD.jobs
    series = result.series
    assert all(b <= c for b, c in zip(series.busy_gpus, series.capacity_gpus, strict=True))
    assert 0.0 <= m["gpu_utilization"] <= 1.0
    held = sum(r.gpu_s for r in result.jobs)
    assert held == pytest.approx(m["busy_gpu_hours"] * 3600.0, rel=1e-9)
    all_gpus = sum(g.count * g.gpus for g in SMALL_LOANING.node_groups)
    assert held <= all_gpus * m["makespan_s"] + 1e-6
    assert m["reclaim_preemptions"] <= m["preemptions"]


@pytest.mark.parametrize("profile", ["aryl", "static", "fifo-backfill", "tiresias"])
def test_loaning_runs_conserve_gpus_and_finish_every_job_once(tmp_path: Path, profile: str) -> None:
    sim = _loaning_simulation(tmp_path)
    result = sim.run(EngineDecider.named(profile))
    assert result.metrics["reclaims"] > 0
    _conserving(result)
    assert not sim._owner, "GPUs still held after the run"


def test_static_never_places_training_on_loans(tmp_path: Path) -> None:
    result = _loaning_simulation(tmp_path).run(EngineDecider.named("static"))
    assert result.metrics["reclaim_shrinks"] == result.metrics["reclaim_preemptions"] == 0
    assert result.metrics["loaned_gpu_hours"] == 0.0
    assert max(result.series.busy_gpus) <= SMALL_LOANING.training_gpus()


def test_loaning_runs_are_deterministic(tmp_path: Path) -> None:
    def strip(metrics: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in metrics.items() if k not in TIMING_KEYS}

    first = _loaning_simulation(tmp_path).run(EngineDecider.named("aryl"))
    second = _loaning_simulation(tmp_path).run(EngineDecider.named("aryl"))
    assert strip(first.metrics) == strip(second.metrics)
    assert [r.row() for r in first.jobs] == [r.row() for r in second.jobs]
    assert first.series == second.series
