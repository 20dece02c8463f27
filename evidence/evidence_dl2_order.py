"""Where DL2's room lies: the ordering it plays behind, more than the scaling it learns.

    .venv/bin/python -m evidence.evidence_dl2_order --processes 2   # section `dl2-order`
    .venv/bin/python -m evidence.evidence_dl2_order --quick --out /tmp/results.md

Peng et al., *DL2: A Deep Learning-driven Scheduler for Deep Learning Clusters* (2019)
report DL2's average JCT 44.1 % below DRF's and 17.5 % below Optimus'. The project's
targets for DL2 (20 % below the `drf` profile, 5 % below the `optimus` profile) compare
whole schedulers: `drf` is FIFO with DRF scaling, `optimus` is SRTF ordering (the
recorded durations as exact estimates) with Optimus scaling. The `dl2` profile plays
behind FIFO with backfill, and the section `dl2-room` found that behind that ordering
even the best of three scaling heuristics, picked per window in hindsight, stays within
14 % of DRF scaling: the ordering decides who runs, the scaling stage only how what is
left is shared.

This script puts DL2 behind `optimus`'s ordering instead, and tries the two other
levers a learned scaling policy has: what it imitates and what it is rewarded for.
Each condition trains DL2 from scratch as `evidence/train_dl2.py` does (imitate a
scaling policy on the training windows, then PPO with the shipped model's budget,
keeping the best validated checkpoint), with three training seeds, and scores the RL
model, its warm-up, and DRF, Optimus and as-requested scaling behind the same ordering
on the held-out windows:

* **FIFO with backfill**: the `dl2` profile as shipped;
* **SRTF**: the `optimus` profile's ordering (preemptive, shortest estimated remaining
  time first), with everything else of DL2's pipeline as shipped;
* **FIFO with backfill, rewarded by time in system**: as shipped, but PPO's reward is
  minus the jobs' time in the system (its sum over an episode is minus the jobs'
  summed JCT, the quantity judged) instead of the paper's summed progress;
* **SRTF, imitating Optimus scaling**: the warm-up starts from the stronger heuristic
  (the one the target is set against) instead of DRF scaling;
* **the same with ten times the budget** (400 PPO updates of 4 episodes);
* **the same, rewarded by time in system**;
* **SRTF, imitating as-requested scaling**: the only heuristic whose episodes behind
  SRTF preempt (it gives every job its request, so the ordering has a job with workers
  to stop others for);
* **SRTF, imitating Optimus scaling, with estimates off**: every job's duration
  estimate off by a log-normal factor (:data:`ESTIMATE_ERROR`) in training and judging,
  and the two profiles scored with the same estimates, since the `optimus` profile
  otherwise reads the recorded durations exactly;
* **SRTF, imitating Optimus scaling, every waiting job at least its minimum**: DL2 and
  the heuristics give a waiting job its minimum even when the running jobs hold the
  whole pool (`minimum_when_full`), so that SRTF can stop a longer job to start it;
  otherwise they give it no workers and SRTF's preemption never runs.

The two profiles the targets name are scored on the same windows. Jobs and windows are
the shipped model's in every condition; the budget is the shipped model's, the teacher
DRF scaling and the reward the paper's unless a condition says otherwise. The run is
deterministic for its seeds on one machine (docs/dl2.md on torch's floating point
across machines).
"""

from __future__ import annotations

import argparse
import dataclasses
import platform
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from evidence.evidence_dl2_gap import (
    TARGET_CUT,
    Condition,
    Plan,
    Windows,
    pct,
    run_task,
    verdict,
)
from evidence.runner import Stopwatch, machine, over_seeds, section_command
from policies.common.pool import FloorParams
from policies.decision import Stage
from policies.profiles import PolicyChoice
from policies.registry import build_registry
from simulator.sweep_cli import runner_from_args
from training.dl2.evaluation import EpisodeScore, score
from training.dl2.reinforce import one_thread
from training.dl2.rollout import Reward

QUICK = "a smoke run: one 20-job window, tiny budgets"
"""What `--quick` runs."""
TASKS = "trainings and scorings"
"""What `--processes` and `--ray` run."""
SECTION = "dl2-order"
SRTF = PolicyChoice(name="srtf")
TIME: Reward = "time-in-system"
ESTIMATE_ERROR = 1.0
"""Sigma of the log-normal error on duration estimates in the condition that has one: one
standard deviation is a factor of e (2.7) either way (ours: the `optimus` profile reads
the recorded durations exactly, which no live scheduler can)."""
CONDITIONS = (
    Condition("fifo-backfill", "FIFO with backfill (the `dl2` profile as shipped)", 80, 2, 5),
    Condition("srtf", "SRTF (the `optimus` profile's ordering)", 80, 2, 5, ordering=SRTF),
    Condition(
        "fifo-backfill-time",
        "FIFO with backfill; reward: time in system",
        80,
        2,
        5,
        reward=TIME,
    ),
    Condition(
        "srtf-optimus",
        "SRTF; warm-up imitates Optimus scaling",
        80,
        2,
        5,
        ordering=SRTF,
        teacher="optimus",
    ),
    Condition(
        "srtf-optimus-10x",
        "SRTF; warm-up imitates Optimus scaling; 10× budget (400 × 4 episodes)",
        400,
        4,
        20,
        ordering=SRTF,
        teacher="optimus",
    ),
    Condition(
        "srtf-optimus-time",
        "SRTF; warm-up imitates Optimus scaling; reward: time in system",
        80,
        2,
        5,
        ordering=SRTF,
        teacher="optimus",
        reward=TIME,
    ),
    Condition(
        "srtf-as-requested",
        "SRTF; warm-up imitates as-requested scaling",
        80,
        2,
        5,
        ordering=SRTF,
        teacher="as_requested",
    ),
    Condition(
        "srtf-optimus-estimates",
        f"SRTF; warm-up imitates Optimus scaling; estimates off by a log-normal factor "
        f"(σ {ESTIMATE_ERROR:g})",
        80,
        2,
        5,
        ordering=SRTF,
        teacher="optimus",
        estimate_error=ESTIMATE_ERROR,
    ),
    Condition(
        "srtf-optimus-full",
        "SRTF; warm-up imitates Optimus scaling; every waiting job its minimum, even over "
        "a full pool (DL2 and the heuristics)",
        80,
        2,
        5,
        ordering=SRTF,
        teacher="optimus",
        floor=FloorParams(minimum_when_full=True),
    ),
)
SHORT = {
    "fifo-backfill": "FIFO with backfill",
    "srtf": "SRTF",
    "fifo-backfill-time": "FIFO with backfill, rewarded by time in system",
    "srtf-optimus": "SRTF, imitating Optimus scaling",
    "srtf-optimus-10x": "SRTF, imitating Optimus scaling, with a 10× budget",
    "srtf-optimus-time": "SRTF, imitating Optimus scaling, rewarded by time in system",
    "srtf-as-requested": "SRTF, imitating as-requested scaling",
    "srtf-optimus-estimates": "SRTF, imitating Optimus scaling, with estimates off",
    "srtf-optimus-full": "SRTF, imitating Optimus scaling, every waiting job its minimum",
}
"""Each condition as the reading names it."""
HEURISTICS = ("drf", "optimus", "as_requested")
NAMES = {"drf": "DRF scaling", "optimus": "Optimus scaling", "as_requested": "as requested"}
PROFILES = ("drf", "optimus")


@dataclass(frozen=True)
class Contender:
    """One row: a contender's windows, once per training seed (once for a heuristic)."""

    name: str
    runs: tuple[tuple[EpisodeScore, ...], ...]

    @property
    def means(self) -> list[float]:
        """Mean over windows of each window's average JCT, per run."""
        return [statistics.fmean(e.avg_jct_s for e in run) for run in self.runs]

    @property
    def finished(self) -> list[int]:
        return [sum(e.jobs_completed for e in run) for run in self.runs]

    @property
    def preemptions(self) -> list[int]:
        """Running jobs stopped to make room, over the windows, per run."""
        return [sum(e.preemptions for e in run) for run in self.runs]


@dataclass(frozen=True)
class Group:
    condition: Condition
    rows: tuple[Contender, ...]


@dataclass(frozen=True)
class Results:
    groups: tuple[Group, ...]
    profiles: dict[float, dict[str, Contender]]
    """The profiles the targets name, as served (`drf` and `optimus`), by the estimates'
    error they were scored with: 0 (exact), and each condition's."""
    windows: Windows
    seeds: tuple[int, ...]
    wall_s: float


def run(quick: bool, runner_args: argparse.Namespace) -> Results:
    watch = Stopwatch()
    plan = Plan.of(CONDITIONS, HEURISTICS, quick)
    outcomes = runner_from_args(runner_args, len(plan.tasks)).map(run_task, plan.tasks)
    groups = []
    for condition in plan.conditions:
        mine = [o for o in outcomes if o.task.condition == condition]
        trained = [o for o in mine if o.task.seed is not None]
        rows = [
            Contender(NAMES[h], (o.windows[h],))
            for h in HEURISTICS
            for o in mine
            if o.task.baseline == h
        ]
        rows.append(Contender("DL2, RL", tuple(o.windows["rl"] for o in trained)))
        rows.append(Contender("DL2, warm-up only", tuple(o.windows["warm"] for o in trained)))
        groups.append(Group(condition, tuple(rows)))
    profiles = {}
    with one_thread():
        for error in sorted({0.0, *(c.estimate_error for c in plan.conditions)}):
            held_out = [dataclasses.replace(w, estimate_error=error) for w in plan.windows.held_out]
            profiles[error] = {
                p: Contender(f"`{p}` profile", (score(p, held_out).episodes,)) for p in PROFILES
            }
    return Results(tuple(groups), profiles, plan.windows, plan.seeds, watch.wall_s)


def _served(results: Results, group: Group) -> dict[str, Contender]:
    """The profiles as served on the group's windows: with its estimates."""
    return results.profiles[group.condition.estimate_error]


def _changes(row: Contender, reference: Contender) -> list[float]:
    """Per run of `row` (per seed), its mean against the reference's (one run) mean."""
    (mean,) = reference.means
    return [m / mean - 1.0 for m in row.means]


def _against(row: Contender, reference: Contender) -> str:
    """One figure for a single run (its spread is per window, in the last column), or
    mean ± SD over seeds with the verdict."""
    changes = _changes(row, reference)
    return pct(changes[0]) if len(changes) == 1 else verdict(changes)


def _per_window(row: Contender, reference: Contender) -> str:
    """A single run against the reference window by window, mean ± SD; "—" over seeds."""
    if len(row.runs) != 1:
        return "—"
    ((ours,), (theirs,)) = row.runs, reference.runs
    return verdict([o.avg_jct_s / r.avg_jct_s - 1.0 for o, r in zip(ours, theirs, strict=True)])


def _span(values: Sequence[int]) -> str:
    low, high = min(values), max(values)
    return f"{low:,}" if low == high else f"{low:,}–{high:,}"


def render(results: Results) -> str:
    lines = [
        "## DL2 behind another ordering, teacher or reward: where the room is",
        "",
        "Generated by `evidence/evidence_dl2_order.py` (`make results-dl2-order`); do not "
        f"edit by hand. The run took {results.wall_s / 60:.1f} min of wall time "
        f"({machine()}, Python {platform.python_version()}).",
        "",
        f"The {len(results.windows.held_out)} held-out windows of `train_dl2.py`, with the "
        "shipped model's jobs. Each group is DL2's pipeline (consolidated placement) behind "
        "one ordering, only the scaling stage differing within it; DL2 is trained from "
        "scratch behind that ordering, as `train_dl2.py` trains the shipped model (imitating "
        "DRF scaling, then PPO rewarded by the paper's summed progress, 80 updates × 2 "
        "episodes; a group that names another teacher, reward or budget differs in that "
        "alone), "
        f"with seeds "
        f"{', '.join(str(s) for s in results.seeds)}: its rows give mean ± SD over seeds. "
        "Mean over windows of each window's average JCT; a change within its spread is a tie. "
        "The rows *as served* are the profiles the targets name; a group whose estimates are "
        "off is compared with them scored with the same estimates.",
        "",
        "| ordering | contender | jobs finished | preemptions | mean JCT (s) "
        "| vs `drf` profile | vs `optimus` profile | per window vs `drf` |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    rows = [(g.condition.label, row, _served(results, g)) for g, row in _shown(results)]
    for error, served in results.profiles.items():
        label = "as served" + (f", estimates off (σ {error:g})" if error else "")
        rows += [(label, row, served) for row in served.values()]
    for label, row, served in rows:
        drf, optimus = served["drf"], served["optimus"]
        lines.append(
            f"| {label} | {row.name} | {_span(row.finished)} | "
            f"{_span(row.preemptions)} | {statistics.fmean(row.means):,.0f} | "
            f"{_against(row, drf)} | {_against(row, optimus)} | {_per_window(row, drf)} |"
        )
    lines += ["", *_reading(results)]
    return "\n".join(lines) + "\n"


def _shown(results: Results) -> list[tuple[Group, Contender]]:
    """Each group's rows, less the heuristics of a setting an earlier group showed: they
    do not train, so behind the same ordering, estimates and floor they are the same
    figures (a heuristic without a floor, as requested, whatever the group's floor)."""
    registry = build_registry()
    floored = {
        name: issubclass(registry.spec(Stage.SCALING, key).info.Params, FloorParams)
        for key, name in NAMES.items()
    }
    seen: set[tuple[str, str | None, float, bool]] = set()
    shown = []
    for group in results.groups:
        condition = group.condition
        ordering = None if condition.ordering is None else condition.ordering.name
        for row in group.rows:
            if row.name in floored:
                floor = floored[row.name] and condition.floor.minimum_when_full
                key = (row.name, ordering, condition.estimate_error, floor)
                if key in seen:
                    continue
                seen.add(key)
            shown.append((group, row))
    return shown


def _row(group: Group, name: str) -> Contender:
    return next(r for r in group.rows if r.name == name)


def _reading(results: Results) -> list[str]:
    """What the table says, every figure read off it."""
    by_key = {g.condition.key: g for g in results.groups}
    fifo, srtf = by_key["fifo-backfill"], by_key["srtf"]
    drf = results.profiles[0.0]["drf"]
    lines = ["**Reading.**", ""]
    moves = {
        name: [pct(_changes(_row(g, NAMES[name]), drf)[0]) for g in (fifo, srtf)]
        for name in ("drf", "optimus")
    }
    lines.append(
        "* **The ordering moves the most.** DRF scaling goes from "
        f"{moves['drf'][0]} against the `drf` profile behind FIFO with backfill to "
        f"{moves['drf'][1]} behind SRTF; Optimus scaling from {moves['optimus'][0]} to "
        f"{moves['optimus'][1]}."
    )
    for group in results.groups:
        rl = _row(group, "DL2, RL")
        targets = []
        for name, reference in _served(results, group).items():
            met = sum(c <= -TARGET_CUT[name] for c in _changes(rl, reference))
            targets.append(
                f"the `{name}` profile {_against(rl, reference)} (target "
                f"{pct(-TARGET_CUT[name])}, met by {met} of {len(rl.runs)} seeds)"
            )
        lines.append(
            f"* **DL2 behind {SHORT[group.condition.key]}.** Against "
            f"{'; against '.join(targets)}. "
            "Behind the same ordering, against its teacher "
            f"({NAMES[group.condition.teacher]}) "
            f"{_against(rl, _row(group, NAMES[group.condition.teacher]))}"
            + (
                ""
                if group.condition.teacher == "optimus"
                else f", against Optimus scaling {_against(rl, _row(group, NAMES['optimus']))}"
            )
            + f", and RL against its warm-up {_paired(rl, _row(group, 'DL2, warm-up only'))}."
        )
    lines += _estimates(results)
    lines += _preemptions(results)
    lines += _over_full_pool(results)
    most = max(n for g in results.groups for row in g.rows for n in row.finished)
    fewer = [
        f"{row.name} behind {SHORT[group.condition.key]}"
        for group, row in _shown(results)
        if min(row.finished) < most
    ]
    if fewer:
        lines.append(
            f"* **Fewer jobs finished:** {', '.join(fewer)}. A mean over fewer jobs leaves out "
            "the ones others ran (as requested never shrinks a job, so it cannot start one that "
            "fits only below its request): not comparable on its own."
        )
    return lines


def _estimates(results: Results) -> list[str]:
    """What estimates that are off do to the profiles (read off the table)."""
    exact = results.profiles[0.0]
    said = []
    for error, served in results.profiles.items():
        if not error:
            continue
        moves = [f"the `{name}` profile {_against(served[name], exact[name])}" for name in PROFILES]
        said.append(
            f"* **Estimates off by a log-normal factor (σ {error:g}).** Against the same "
            f"profiles with exact estimates: {', '.join(moves)}. FIFO and DRF scaling read no "
            "estimate; SRTF orders by it and Optimus scaling weighs remaining time with it."
        )
    return said


def _preemptions(results: Results) -> list[str]:
    """Why SRTF preempts behind one scaling policy and not another (read off the table)."""
    optimus = results.profiles[0.0]["optimus"]
    srtf = next(g for g in results.groups if g.condition.key == "srtf")
    requested = _row(srtf, NAMES["as_requested"])
    if max(optimus.preemptions) or not min(requested.preemptions):
        return []
    return [
        "* **SRTF preempts only for a job that scaling gives workers.** The `optimus` profile "
        "stops no running job on these windows, as requested behind the same ordering "
        f"{_span(requested.preemptions)} times: once the running jobs hold the cluster, "
        "Optimus scaling, DRF scaling and DL2 give a waiting job no workers (except where "
        "every waiting job is given its minimum, next point), and the ordering stops "
        "a running job only to start one that has workers. As-requested scaling gives every "
        "job its request, so SRTF's preemption runs."
    ]


def _over_full_pool(results: Results) -> list[str]:
    """What a waiting job's minimum over a full pool does (read off the table)."""
    group = next((g for g in results.groups if g.condition.floor.minimum_when_full), None)
    if group is None:
        return []
    served = _served(results, group)
    said = []
    for name in ("optimus", "drf"):
        row = _row(group, NAMES[name])
        said.append(
            f"{row.name} {_against(row, served[name])} against the `{name}` profile "
            f"({_span(row.preemptions)} preemptions)"
        )
    rl = _row(group, "DL2, RL")
    teacher = _row(group, NAMES["optimus"])
    sign, _, _ = over_seeds(_changes(rl, teacher))
    whose = (
        "the floor's, not the learned part's"
        if sign == 0
        else "the learned part's beyond the floor's"
        if sign < 0
        else "the floor's, and DL2 keeps less of it than the heuristic"
    )
    return [
        "* **Every waiting job its minimum, even over a full pool.** Behind SRTF, with the "
        f"same floor: {'; '.join(said)}; DL2 RL {_span(rl.preemptions)} preemptions. "
        f"Against Optimus scaling with the same floor DL2 is {_against(rl, teacher)}: the "
        f"margin this floor opens is {whose}."
    ]


def _paired(ours: Contender, theirs: Contender) -> str:
    """Seed by seed, the change of `ours` against `theirs`, mean ± SD."""
    return verdict([o / t - 1.0 for o, t in zip(ours.means, theirs.means, strict=True)])


def main(argv: Sequence[str] | None = None) -> int:
    return section_command(__doc__, SECTION, run, render, argv, quick=QUICK, what=TASKS)


if __name__ == "__main__":
    raise SystemExit(main())
