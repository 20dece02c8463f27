"""Evidence for DL2: the warm-up and the RL model against DRF and Optimus, beside the paper.

    .venv/bin/python -m evidence.evidence_dl2                    # section `dl2` of docs/results.md
    .venv/bin/python -m evidence.evidence_dl2 --quick --out /tmp/results.md   # smoke run

Peng et al., *DL2: A Deep Learning-driven Scheduler for Deep Learning Clusters*
(2019) report 44.1 % lower average JCT than DRF and 17.5 % lower than Optimus.
This script puts our figures beside theirs (docs/dl2.md):

* the **RL model** is the shipped one (`policies/learned/dl2/shipped.py`); the
  **warm-up model** is rebuilt exactly as `evidence/train_dl2.py` builds it before
  RL (same defaults, same seed, the same `warm_up` function), so the gap between
  the two is what RL added;
* contenders run (a) in DL2's own pipeline, only the scaling stage differing (DL2
  RL, DL2 warm-up, DRF, Optimus, as requested), which isolates the decision DL2
  learns, and (b) as the shipped `drf` and `optimus` profiles, whose ordering
  and placement are their own (Optimus orders by shortest remaining time), as the
  paper's baselines are whole schedulers;
* episode sets: the held-out windows `train_dl2.py` judges on, later windows of
  the two training traces, and windows of ITP and Alibaba, which DL2 never saw.

The section is written with `results_sections.splice`, so `make_results.py`
keeps it when it regenerates the rest of the file. The run is deterministic.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from evidence.runner import Stopwatch, add_out, command_line, machine, write_section
from evidence.train_dl2 import budget, build_parser, warm_up
from policies.learned.dl2.shipped import shipped_model
from policies.registry import build_registry
from simulator.perf import FAMILY_SOURCES, load_perf_tables
from training.dl2.episodes import EpisodeSpec, held_out_episodes, windows
from training.dl2.evaluation import Contender, Score, score
from training.dl2.imitation import teacher_profile
from training.dl2.reinforce import one_thread

SECTION = "dl2"
PAPER_CUT = {"drf": 0.441, "optimus": 0.175}
"""The paper's abstract: DL2's average JCT is 44.1 % below DRF's and 17.5 % below Optimus'."""


@dataclass(frozen=True)
class EpisodeSet:
    name: str
    why: str
    episodes: tuple[EpisodeSpec, ...]


@dataclass(frozen=True)
class Entry:
    """One contender: a table column."""

    key: str
    label: str
    contender: Contender


@dataclass(frozen=True)
class TrainingBudget:
    """What `train_dl2.py`'s default run, the shipped model's, trains on."""

    windows: int
    jobs: int
    updates: int
    episodes_per_update: int


@dataclass(frozen=True)
class Results:
    sets: tuple[EpisodeSet, ...]
    entries: tuple[Entry, ...]
    scores: dict[tuple[str, str], Score]
    """By (episode set name, entry key)."""
    warm_up_s: float
    demonstrations: int
    imitation_accuracy: float
    rl_version: str
    shipped_budget: TrainingBudget
    wall_s: float
    cpu_s: float


def episode_sets(jobs: int, quick: bool) -> list[EpisodeSet]:
    """The windows scored. Every cluster is scaled to about 40 GPUs, as in training.

    Seeds 600–900 are not used by training (0, 100), validation (400, 500) or the
    held-out set (200, 300), so the filled-in workload differs too.
    """
    philly, helios = "philly.2w-2017-10-02.csv", "helios_venus.1w-2020-06-01.csv"
    sets = [
        EpisodeSet(
            "held-out",
            "the windows `train_dl2.py` judges on",
            tuple(held_out_episodes(jobs)),
        ),
        EpisodeSet(
            "Philly, later",
            f"Oct 11–15 2017, after every training, validation and held-out window of `{philly}`",
            tuple(
                windows(
                    philly,
                    "philly.json",
                    [16500, 17500, 18500, 19500, 20500, 21500, 22500, 24000],
                    jobs=jobs,
                    seed=600,
                )
            ),
        ),
        EpisodeSet(
            "Helios, later",
            f"Jun 8–16 2020, the days after the week of `{helios}`, on its training cluster",
            tuple(
                windows(
                    "helios_venus.full.csv",
                    "helios_venus.json",
                    [6500, 7000, 7500, 8000, 8500, 9000, 9500, 10500],
                    jobs=jobs,
                    cluster_fraction=0.05,
                    seed=700,
                )
            ),
        ),
        EpisodeSet(
            "ITP (unseen)",
            "a trace and cluster DL2 never saw",
            tuple(
                windows(
                    "itp_cluster04.2w-day14.csv",
                    "itp.json",
                    [0, 800, 1600, 2400, 3200, 4000, 4800, 6400],
                    jobs=jobs,
                    seed=800,
                )
            ),
        ),
        EpisodeSet(
            "Alibaba (unseen)",
            "unscaled, since one node per group is already 24 GPUs; small, short jobs "
            "arriving over hours, so little or nothing queues and scaling mostly decides "
            "how far elastic jobs grow",
            tuple(
                windows(
                    "alibaba_openb.2w-day135.csv",
                    "alibaba_openb.json",
                    [0, 700, 1400, 2100, 2700],
                    jobs=jobs,
                    cluster_fraction=1.0,
                    seed=900,
                )
            ),
        ),
    ]
    if quick:
        return [EpisodeSet(s.name, s.why, s.episodes[:1]) for s in sets]
    return sets


def describe(episodes: Sequence[EpisodeSpec]) -> str:
    """Which windows, read off the specs: trace, first jobs, cluster, scale and GPUs."""
    groups: dict[tuple[str, str, float], list[EpisodeSpec]] = {}
    for spec in episodes:
        groups.setdefault((spec.trace, spec.cluster, spec.cluster_fraction), []).append(spec)
    parts = []
    for (trace, cluster, fraction), specs in groups.items():
        gpus = sum(g.count * g.gpus for g in specs[0].cluster_spec().node_groups)
        starts = ", ".join(f"{s.start:,}" for s in specs)
        parts.append(f"`{trace}` at jobs {starts} on `{cluster}` × {fraction:g} ({gpus} GPUs)")
    return "; ".join(parts)


def run(quick: bool) -> Results:
    watch = Stopwatch()
    # The warm-up exactly as train_dl2.py builds it (its defaults, or its --quick).
    defaults = build_parser().parse_args(["--quick"] if quick else [])
    plan = budget(defaults)
    default_args = build_parser().parse_args([])
    default_plan = budget(default_args)
    warmed = warm_up(plan.train, plan.teacher, plan.imitation_epochs, defaults.seed)
    warm_up_s = warmed.demonstrations_s + warmed.imitation_s
    print(
        f"warm-up: {warmed.demonstrations} demonstrations, "
        f"{plan.imitation_epochs} epochs ({warm_up_s:.1f} s)",
        flush=True,
    )

    shipped = shipped_model()
    registry = build_registry()
    entries = (
        Entry("rl", "DL2 RL (shipped)", shipped.model),
        Entry("warm", "DL2 warm-up", warmed.model),
        Entry("drf_scaling", "DRF scaling", teacher_profile("drf", registry)),
        Entry("optimus_scaling", "Optimus scaling", teacher_profile("optimus", registry)),
        Entry("as_requested", "as requested", teacher_profile("as_requested", registry)),
        Entry("drf", "`drf` profile", "drf"),
        Entry("optimus", "`optimus` profile", "optimus"),
    )
    sets = tuple(episode_sets(plan.jobs, quick))
    scores: dict[tuple[str, str], Score] = {}
    with one_thread():
        for episode_set in sets:
            for entry in entries:
                clock = time.perf_counter()
                result = score(
                    entry.contender, episode_set.episodes, name=entry.label, registry=registry
                )
                scores[(episode_set.name, entry.key)] = result
                print(
                    f"  {episode_set.name:18s} {entry.label:20s} "
                    f"{result.mean_avg_jct_s:8.0f} s  ({time.perf_counter() - clock:.1f} s)",
                    flush=True,
                )
    accuracy = warmed.log[-1]["accuracy"] if warmed.log else float("nan")
    return Results(
        sets=sets,
        entries=entries,
        scores=scores,
        warm_up_s=warm_up_s,
        demonstrations=warmed.demonstrations,
        imitation_accuracy=accuracy,
        rl_version=shipped.version,
        shipped_budget=TrainingBudget(
            windows=len(default_plan.train),
            jobs=default_plan.jobs,
            updates=default_plan.updates,
            episodes_per_update=int(default_args.episodes_per_update),
        ),
        wall_s=watch.wall_s,
        cpu_s=watch.cpu_s,
    )


def change(ours: Score, theirs: Score) -> float:
    """Relative change of the mean average JCT (−0.1: ours is 10 % lower)."""
    return ours.mean_avg_jct_s / theirs.mean_avg_jct_s - 1.0


def wins(ours: Score, theirs: Score) -> int:
    """Episodes where ours has the strictly lower average JCT."""
    return sum(
        a.avg_jct_s < b.avg_jct_s for a, b in zip(ours.episodes, theirs.episodes, strict=True)
    )


def pooled_scores(
    sets: Sequence[EpisodeSet], scores: Mapping[tuple[str, str], Score], keys: Sequence[str]
) -> dict[str, Score]:
    """Each contender over every episode of every set (each episode weighing the same)."""
    out = {}
    for key in keys:
        episodes = tuple(e for s in sets for e in scores[(s.name, key)].episodes)
        mean = sum(e.avg_jct_s for e in episodes) / len(episodes)
        out[key] = Score(name=key, mean_avg_jct_s=mean, episodes=episodes)
    return out


def pooled(results: Results, key: str) -> Score:
    """A contender over every episode of every set (each episode weighing the same)."""
    return pooled_scores(results.sets, results.scores, [key])[key]


def mean_queue(result: Score) -> float:
    """Mean over episodes of the average wait before a first start (0 where none waited)."""
    waits = [e.avg_queue_s or 0.0 for e in result.episodes]
    return sum(waits) / len(waits)


def completed(result: Score) -> int:
    return sum(e.jobs_completed for e in result.episodes)


def pct(value: float) -> str:
    if round(value * 100, 1) == 0:
        return "±0.0 %"
    return f"{value * 100:+.1f} %".replace("-", "−")


def _share(value: float, digits: int = 1) -> str:
    return f"{value * 100:.{digits}f} %"


def cell(ours: Score, theirs: Score) -> str:
    return f"{pct(change(ours, theirs))} ({wins(ours, theirs)}/{len(ours.episodes)})"


Row = tuple[str, dict[str, Score]]


def _rows(results: Results) -> list[Row]:
    rows = [
        (s.name, {e.key: results.scores[(s.name, e.key)] for e in results.entries})
        for s in results.sets
    ]
    everything = {e.key: pooled(results, e.key) for e in results.entries}
    return [*rows, (f"all {len(everything['rl'].episodes)} episodes", everything)]


def render(results: Results) -> str:
    rows = _rows(results)
    lines = [
        "## DL2 against DRF and Optimus",
        "",
        "Generated by `evidence/evidence_dl2.py` (`make results-dl2`); do not edit by hand.",
        f"The run took {results.wall_s / 60:.1f} min of wall time and "
        f"{results.cpu_s / 60:.1f} min of CPU time ({machine()}, "
        f"{os.cpu_count()} cores shared with other work, Python {platform.python_version()}, "
        f"one torch thread), {results.warm_up_s:.0f} s of it rebuilding the warm-up model.",
        "",
        "Peng et al. (2019) report DL2's average JCT 44.1 % below DRF's and 17.5 % below "
        "Optimus'. Here, per episode, the average JCT of its finished jobs; per set, the "
        "mean over its episodes (each weighs the same), as `training/dl2/evaluation.py` "
        "scores; lower is better. The first five columns share DL2's pipeline and differ "
        "only in scaling; the two profiles are the baselines as whole schedulers. The last "
        "column says how contended a set is: the mean wait before a first start under DRF "
        "scaling.",
        "",
        "| episode set | " + " | ".join(e.label for e in results.entries) + " | queueing (s) |",
        "|---|" + "---:|" * (len(results.entries) + 1),
    ]
    flagged = False
    for name, by_key in rows:
        most = max(completed(score) for score in by_key.values())
        cells = []
        for entry in results.entries:
            result = by_key[entry.key]
            short = completed(result) < most
            flagged |= short
            cells.append(f"{result.mean_avg_jct_s:,.0f}" + (" †" if short else ""))
        cells.append(f"{mean_queue(by_key['drf_scaling']):,.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    if flagged:
        lines += [
            "",
            "† finished fewer jobs than the others in this set, so its mean leaves out jobs "
            "they ran: not comparable (see below).",
        ]

    lines += [
        "",
        "Change of DL2's mean average JCT (negative: DL2 is faster), and in brackets the "
        "episodes where DL2 is faster; the paper's figures first:",
        "",
        "| episode set | RL vs DRF scaling | RL vs Optimus scaling | RL vs `drf` | "
        "RL vs `optimus` | RL vs warm-up | warm-up vs DRF scaling |",
        "|---|---:|---:|---:|---:|---:|---:|",
        f"| paper (Peng et al., 2019) | {pct(-PAPER_CUT['drf'])} | "
        f"{pct(-PAPER_CUT['optimus'])} | {pct(-PAPER_CUT['drf'])} | "
        f"{pct(-PAPER_CUT['optimus'])} | | |",
    ]
    for name, by_key in rows:
        rl = by_key["rl"]
        cells = [
            cell(rl, by_key["drf_scaling"]),
            cell(rl, by_key["optimus_scaling"]),
            cell(rl, by_key["drf"]),
            cell(rl, by_key["optimus"]),
            cell(rl, by_key["warm"]),
            cell(by_key["warm"], by_key["drf_scaling"]),
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    lines += ["", *_reading(results, rows), "", *_setup(results)]
    return "\n".join(lines) + "\n"


def _reading(results: Results, rows: Sequence[Row]) -> list[str]:
    """What the tables say, every figure read off them or the performance model."""
    total = rows[-1][1]
    rl, warm = total["rl"], total["warm"]
    sets = list(rows[:-1])
    growing = ("rl", "warm", "drf_scaling", "optimus_scaling")

    def spread(by_key: dict[str, Score]) -> float:
        means = [by_key[k].mean_avg_jct_s for k in growing]
        return max(means) / min(means) - 1.0

    spreads = [spread(by_key) for _, by_key in sets]
    vs_drf = {name: change(by_key["rl"], by_key["drf_scaling"]) for name, by_key in sets}
    others = [v for name, v in vs_drf.items() if name != "held-out"]
    busiest = max(sets, key=lambda row: mean_queue(row[1]["drf_scaling"]))
    calmest = min(sets, key=lambda row: mean_queue(row[1]["drf_scaling"]))
    best = min(results.entries, key=lambda e: total[e.key].mean_avg_jct_s)
    tables = load_perf_tables()
    doubling = [2 * tables.family(f).doubling_efficiency for f in FAMILY_SOURCES]
    near_linear = sum(d >= 1.8 for d in doubling)
    ps_low, ps_high = tables.ps_efficiency[0], tables.ps_efficiency[-1]
    sample = results.sets[0].episodes[0]
    shipped = results.shipped_budget
    reproduced = (
        change(rl, total["drf"]) <= -PAPER_CUT["drf"]
        and change(rl, total["optimus"]) <= -PAPER_CUT["optimus"]
    )
    lines = [
        "**Reading.**",
        "",
        f"* **Beside the paper.** Over all {len(rl.episodes)} episodes DL2 RL changes the "
        f"mean average JCT by {pct(change(rl, total['drf']))} against `drf` and "
        f"{pct(change(rl, total['optimus']))} against `optimus` (the paper: −44.1 % and "
        f"−17.5 %); as scaling stages in one pipeline, "
        f"{pct(change(rl, total['drf_scaling']))} against DRF and "
        f"{pct(change(rl, total['optimus_scaling']))} against Optimus. Against DRF "
        f"scaling it is {pct(vs_drf['held-out'])} on the held-out windows "
        f"`train_dl2.py` judges on, and {pct(min(others))} to {pct(max(others))} on "
        "the other sets. "
        + (
            "Both of the paper's margins are matched."
            if reproduced
            else "The paper's margins are not reproduced here."
        ),
        f"* **RL over imitation:** {pct(change(rl, warm))} "
        f"pooled, faster in {wins(rl, warm)} of {len(rl.episodes)} episodes. The warm-up "
        f"model alone is {pct(change(warm, total['drf_scaling']))} against its teacher, "
        "DRF.",
        "* **Little room for scaling.** Every policy that grows jobs here first lets running "
        "jobs keep what they hold and starts waiting jobs at their minimum (the floor, "
        "docs/dl2.md); only what is left is handed out, and only to the "
        f"{_share(sample.elastic_fraction, 0)} of jobs that are elastic, within half to twice "
        "their request. Among the four policies that grow jobs (DL2 RL, warm-up, DRF, "
        "Optimus scaling) the set means lie within "
        f"{_share(min(spreads))} to {_share(max(spreads))} of "
        "each other. In the paper every job's workers and servers are decided afresh each "
        "time slot, so the allocation is the whole schedule; here growing a running job "
        "restarts it.",
        "* **Measured speed-ups.** Our jobs' speeds come from Gavel and Pollux/Sia "
        "measurements (docs/performance-model.md): a doubling of workers multiplies "
        f"speed by {min(doubling):.2f}–{max(doubling):.2f} depending on the family, "
        f"1.8 or more for {near_linear} of the {len(doubling)}. Near-linear jobs need "
        "about the same GPU-seconds whatever their share, so how GPUs are split changes "
        "little and who gets them first changes much. Parameter servers matter only for "
        f"the {_share(sample.ps_fraction, 0)} of jobs that use them (a PS job runs at "
        f"{ps_low[1]:.2f} of its best speed with {ps_low[0]:g} servers per worker, "
        f"{ps_high[1]:.2f} with {ps_high[0]:g}). The paper's jobs are parameter-server jobs whose "
        "speed hinges on the worker-to-server split, which a fair share ignores; the "
        "section below (`make results-dl2-gap`) tests that: with every job elastic and "
        "using servers, DRF scaling does better, not worse, and DL2's margin over it "
        "does not grow.",
        f"* **Optimus.** As a scaling stage it is "
        f"{pct(change(total['optimus_scaling'], total['drf_scaling']))} against DRF; as "
        f"a profile it is {pct(change(total['optimus'], total['drf']))} against `drf`"
        + (
            ", the best contender over all episodes"
            if best.key == "optimus"
            else f" (the best contender over all episodes is {best.label})"
        )
        + ". The profile differs from the stage only in its SRTF ordering, fed the "
        "recorded durations, exact by construction, where Optimus itself estimates "
        "remaining time from each job's training curve online; DL2 keeps FIFO with "
        "backfill and does not learn the order.",
        f"* **Contention.** On {busiest[0]}, the most contended set "
        f"({mean_queue(busiest[1]['drf_scaling']):,.0f} s of queueing), RL is "
        f"{pct(vs_drf[busiest[0]])} against DRF scaling; on {calmest[0]}, the least "
        f"({mean_queue(calmest[1]['drf_scaling']):,.0f} s), {pct(vs_drf[calmest[0]])}, "
        f"with the four growing policies within {_share(spread(calmest[1]))} of each other"
        + (
            ": where nothing waits, growing every elastic job is right and all of them do it."
            if spread(calmest[1]) < 0.01
            else "."
        ),
        f"* **A small budget.** The shipped model trained on {shipped.windows} windows of "
        f"{shipped.jobs} jobs (durations capped at {(sample.max_duration_s or 0) / 3600:g} h) "
        f"with {shipped.updates} PPO updates of {shipped.episodes_per_update} episodes; "
        "its validation scores wander by about ±3 % between checkpoints (docs/dl2.md), "
        "so one set's difference of that size is weak evidence, and the brackets count "
        "the episodes won. Ten times the budget, over three training seeds, is a tie "
        "with it (section below).",
    ]
    if all(abs(change(by_key["drf"], by_key["drf_scaling"])) < 1e-9 for _, by_key in rows):
        lines.append(
            "* `drf` scores exactly as DRF scaling in DL2's pipeline: a job the scaling "
            "stage cannot start gets no workers, and such a job does not block the queue, "
            "so FIFO with or without backfill runs the same jobs."
        )
    lines.append(f"* {_unfinished(results)}")
    return lines


def _unfinished(results: Results) -> str:
    """Jobs a contender never finished, and why: too big for the scaled cluster."""
    fallbacks = ", ".join(
        f"{e.label} {sum(results.scores[(s.name, e.key)].fallbacks for s in results.sets)}"
        for e in results.entries[:2]
    )
    notes: list[str] = []
    only_as_requested = False
    for s in results.sets:
        for i, spec in enumerate(s.episodes):
            done = {
                e.key: results.scores[(s.name, e.key)].episodes[i].jobs_completed
                for e in results.entries
            }
            if min(done.values()) == spec.jobs:
                continue
            gpus = sum(g.count * g.gpus for g in spec.cluster_spec().node_groups)
            jobs = spec.job_specs()
            never = sum(j.min_workers * j.gpus_per_worker > gpus for j in jobs)
            shrunk = sum(
                j.workers * j.gpus_per_worker > gpus >= j.min_workers * j.gpus_per_worker
                for j in jobs
            )
            fewest = min(done.values())
            only_as_requested |= [k for k, n in done.items() if n == fewest] == ["as_requested"]
            why = [
                f"{n} job{'s' * (n > 1)} {what}"
                for n, what in (
                    (never, "larger than the cluster even at its minimum"),
                    (shrunk, "that fits only below its request"),
                )
                if n
            ]
            labels = {e.key: e.label for e in results.entries}
            counts = ", ".join(f"{labels[k]} {n}" for k, n in done.items() if n < spec.jobs)
            notes.append(
                f"`{spec.trace}` at {spec.start:,} ({gpus} GPUs; {' and '.join(why)}): "
                f"finished {counts} of {spec.jobs}"
            )
    text = f"**Checks.** Fallbacks to DRF: {fallbacks}."
    if notes:
        text += " Unfinished jobs: " + "; ".join(notes) + "."
    if only_as_requested:
        text += (
            " As requested never shrinks a job, so it cannot start one that fits only "
            "below its request; the others start it and it then holds most of the "
            "cluster, which is why as requested looks fast where it finished fewer jobs."
        )
    return text


def _setup(results: Results) -> list[str]:
    sample = results.sets[0].episodes[0]
    lines = [
        "**Setup.**",
        "",
        f"* Models: RL = the shipped model (`{results.rl_version}`, `make dl2-model`); "
        f"warm-up = `train_dl2.py`'s imitation step rebuilt with its defaults and seed "
        f"({results.demonstrations:,} demonstrations of DRF, "
        f"{_share(results.imitation_accuracy)} of the teacher's actions matched).",
        "* Pipelines: the first five columns run the `dl2` profile (FIFO with backfill, "
        "consolidated placement, DRF fallback), only the scaling stage differing, models "
        "greedy and without a wall-clock budget; the `dl2` profile as served is the RL "
        "column. `drf` is FIFO without backfill, DRF scaling, consolidated placement; "
        "`optimus` is SRTF ordering (preemptive, recorded durations as perfect estimates), "
        "Optimus scaling, consolidated placement.",
        f"* Episodes: {sample.jobs} consecutive jobs of a shared trace per window, on the "
        "trace's paired cluster with every node group scaled down; workload options as in "
        f"training: {_share(sample.elastic_fraction, 0)} of jobs elastic (half to twice their "
        f"request), {_share(sample.ps_fraction, 0)} with parameter servers, durations capped at "
        f"{(sample.max_duration_s or 0) / 3600:g} h, measured performance model, seed per "
        "window.",
    ]
    for s in results.sets:
        lines.append(f"  * {s.name}: {describe(s.episodes)}; {s.why}.")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    add_out(parser)
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 20-job windows, one per set"
    )
    args = parser.parse_args(argv)
    results = run(args.quick)
    write_section(args.out, SECTION, render(results), results.wall_s)
    print(f"wrote section {SECTION!r} of {args.out} ({results.wall_s:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
