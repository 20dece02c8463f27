"""Sanity of the model on a real trace: the published direction of the classic results."""

from __future__ import annotations

from simulator.cluster import load_cluster
from simulator.core import SimOptions
from simulator.paths import clusters_dir, traces_dir
from simulator.runner import RunConfig, simulate
from simulator.traces import read_trace


def test_tiresias_and_srtf_beat_fifo_on_a_philly_window() -> None:
    # The first 300 jobs of the two-week Philly window on an eighth of its cluster
    # (76 GPUs), so a queue forms within hours instead of days; measured model.
    # Tiresias (NSDI'19, §6) and SRTF cut average JCT versus FIFO, whose long jobs
    # block the queue; this is the direction every later paper reproduces.
    philly = load_cluster(clusters_dir() / "philly.json")
    eighth = philly.model_copy(
        update={
            "node_groups": tuple(
                g.model_copy(update={"count": g.count // 8}) for g in philly.node_groups
            )
        }
    )
    jobs = read_trace(traces_dir() / "philly.2w-2017-10-02.csv", max_jobs=300)
    config = RunConfig(seed=0, sim=SimOptions(round_period_s=300.0))
    runs = simulate(jobs, eighth, ["fifo", "srtf", "tiresias"], config)
    jct = {run.profile: run.result.metrics["avg_jct_s"] for run in runs}
    assert jct["srtf"] < 0.5 * jct["fifo"], jct
    assert jct["tiresias"] < 0.6 * jct["fifo"], jct
    for run in runs:
        assert run.result.metrics["jobs_completed"] == 300
