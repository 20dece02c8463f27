"""The dual agent's episodes: windows of the Philly trace on the heterogeneous Gavel cluster.

`shared/clusters/hetero-gavel.json` (36 V100, 36 P100, 36 K80 in 4-GPU machines,
prices per GPU-hour from `shared/perf/gpu_prices.json`) with consecutive jobs of
`philly.2w-2017-10-02.csv`, model families drawn from Gavel's (whose speeds were
measured on all three GPU types), durations capped so an episode takes seconds.
At its full size (108 GPUs) the Philly windows never queue (Tiresias: no wait at
all), so ordering would have nothing to learn: the episodes use a third of each
node group (3 machines of each type, 36 GPUs), where Tiresias keeps about 0.7 of
the GPUs busy, the load the cluster file asks for (its `sizing`). The machines'
speed variation is drawn per episode seed, so no episode teaches
machine identities: the GP must learn them online. Half of the variance of a
machine's log speed is shared with its rack (`RACK_SHARE`,
:func:`simulator.perf.machine_factors`; in `hetero-gavel.json` each node group is
one rack of 9), the other half is the machine's own: the similarity the RWGP's
machine graph is there to exploit. Training, validation and held-out windows are
disjoint.
"""

from __future__ import annotations

from dataclasses import dataclass

from simulator.core import SimOptions, Simulation
from simulator.perf import PerfOptions
from training.dl2.episodes import EpisodeSpec

TRACE = "philly.2w-2017-10-02.csv"
CLUSTER = "hetero-gavel.json"


CLUSTER_FRACTION = 1 / 3

RACK_SHARE = 0.5
"""Share of machine speed variance common to a rack (ours: the PAI data has no
per-host or per-rack column to derive it from; docs/dual-agent.md)."""


def perf_options() -> PerfOptions:
    """The performance model of the dual agent's episodes: rack-correlated machines."""
    return PerfOptions(machine_rack_share=RACK_SHARE)


@dataclass(frozen=True)
class HeteroEpisode(EpisodeSpec):
    """An episode whose machines' speed factors are correlated within a rack."""

    def simulation(self) -> Simulation:
        return Simulation(
            self.job_specs(),
            self.cluster_spec(),
            perf=perf_options(),
            options=SimOptions(record_timeseries=False),
            seed=self.seed,
        )


def window(
    start: int, jobs: int, seed: int, cluster_fraction: float = CLUSTER_FRACTION
) -> EpisodeSpec:
    return HeteroEpisode(
        trace=TRACE,
        cluster=CLUSTER,
        start=start,
        jobs=jobs,
        cluster_fraction=cluster_fraction,
        max_duration_s=4 * 3600.0,
        elastic_fraction=0.0,
        ps_fraction=0.0,
        model_mix="gavel",
        seed=seed,
    )


def training_episodes(jobs: int = 60) -> list[EpisodeSpec]:
    return [window(start, jobs, 10 + i) for i, start in enumerate(range(0, 12000, 1000))]


HELD_OUT_STARTS = (12500, 14500, 16500, 18500, 20500, 13500, 15500, 17500, 19500, 21500)
"""Trace rows where the held-out windows start: all after the training windows' (rows
0 to 11,059), 1,000 rows apart. The first five were the evidence's until the other five,
never looked at before, were added; they stay first so the trainer's verdict (its first
`held_out_episodes`) judges on the same windows as before."""


def held_out_episodes(jobs: int = 60) -> list[EpisodeSpec]:
    return [window(start, jobs, 900 + i) for i, start in enumerate(HELD_OUT_STARTS)]


SECOND_HELD_OUT_STARTS = tuple(
    thousand + offset for thousand in range(12000, 24000, 1000) for offset in (0, 250, 750)
)
"""Trace rows where the second held-out set's 36 windows start (fixed 2026-11-27 before any
run of it was played; docs/dual-agent.md, *Evaluation protocol*): after the training
windows, never overlapping the first set's (which start at 500 past a thousand), and
never scored before. 36 windows × 3 seeds: a fee difference of the size the first set
saw (about 15 USD a run, with a spread of about 75) lies within twice its standard error
on 30 runs and beyond it on 108."""

SECOND_HELD_OUT_SEED = 3000
"""First seed of the second held-out set (window i: 3000 + i; the evidence adds 100 per
repetition): shared with no training, search or first held-out run."""


def second_held_out_episodes(jobs: int = 60) -> list[EpisodeSpec]:
    return [
        window(start, jobs, SECOND_HELD_OUT_SEED + i)
        for i, start in enumerate(SECOND_HELD_OUT_STARTS)
    ]
