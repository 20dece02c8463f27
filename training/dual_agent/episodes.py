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
machine identities: the GP must learn them online. Training, validation and
held-out windows are disjoint.
"""

from __future__ import annotations

from training.dl2.episodes import EpisodeSpec

TRACE = "philly.2w-2017-10-02.csv"
CLUSTER = "hetero-gavel.json"


CLUSTER_FRACTION = 1 / 3


def window(
    start: int, jobs: int, seed: int, cluster_fraction: float = CLUSTER_FRACTION
) -> EpisodeSpec:
    return EpisodeSpec(
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


def held_out_episodes(jobs: int = 60) -> list[EpisodeSpec]:
    return [
        window(start, jobs, 900 + i) for i, start in enumerate((12500, 14500, 16500, 18500, 20500))
    ]
