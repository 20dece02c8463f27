"""Train a DL2 model shipped with Arbiter: imitate a heuristic, fine-tune with PPO, judge, write.

    .venv/bin/python -m evidence.train_dl2                 # the `dl2` profile's model
    .venv/bin/python -m evidence.train_dl2 --profile dl2-srtf --updates 400 \
        --episodes-per-update 4 --validate-every 20       # the `dl2-srtf` profile's model
    .venv/bin/python -m evidence.train_dl2 --quick --out /tmp/dl2.safetensors   # smoke run

`--profile` names the served profile the model is for; its setting (the ordering the
model plays behind, its floor, and the heuristic it imitates: the profile's scaling
fallback, `training.dl2.episodes.ServedSetting`) applies to every step below, and the
model is written where that profile's scaling policy reads its shipped model.

Steps (docs/dl2.md; Peng et al., 2019, §4.2–4.3):
1. Simulated decision log: the profile with the teacher's scaling (`dl2`: DRF) runs
   the training episodes (windows of the shared Philly and Helios traces on scaled
   clusters).
2. Supervised warm-up: cross-entropy on the teacher's steps, replayed through DL2's
   round.
3. RL: PPO on the same episodes, the policy sampling, rewards = normalised progress
   (`--reward time-in-system`: minus the jobs' time in the system); the checkpoint
   with the best validation score (other windows) is kept.
4. Judge on held-out episodes: the RL model ships only if it beats the warm-up
   model (as retraining activates a candidate only if it wins); both are also
   scored against the teacher's and as-requested scaling in the same setting, and
   against the `drf` and `optimus` profiles.
5. Write the winner (safetensors, configuration in the header) to `--out`.
Timings of every step are printed; the run is deterministic for `--seed`.
`--processes N` or `--ray ADDRESS` play the simulated episodes of steps 3–4 on
local processes or a Ray cluster, as `arbiter sweep` runs its points; the model
written is the same.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from evidence.runner import ROOT, command_line
from policies.common.pool import DEFAULT_FLOOR, FloorParams
from policies.learned.dl2.features import Dl2Config
from policies.learned.dl2.network import Dl2Model
from simulator.perf import FAMILY_SOURCES
from simulator.sweep_cli import add_runner_arguments, runner_from_args
from training.dl2.episodes import (
    EpisodeSpec,
    ServedSetting,
    held_out_episodes,
    training_episodes,
    validation_episodes,
)
from training.dl2.evaluation import Score, compare, score
from training.dl2.imitation import (
    ImitationArgs,
    demonstrations,
    imitate,
    simulated_records,
    teacher_profile,
)
from training.dl2.reinforce import PpoArgs, one_thread, train_ppo
from training.dl2.rollout import REWARDS
from training.dl2.trainer import Dl2Trainer
from training.registry import trainers

SHIPPED_DIR = ROOT / "policies" / "learned" / "dl2" / "default"


def served_profiles() -> list[str]:
    """The profiles that serve a shipped DL2 model: those DL2's trainers retrain."""
    return [t.profile for t in trainers() if isinstance(t, Dl2Trainer)]


@dataclass(frozen=True)
class Budget:
    """The episodes and budgets of a run, from the command line (`--quick` shrinks them)."""

    jobs: int
    imitation_epochs: int
    updates: int
    train: list[EpisodeSpec]
    validation: list[EpisodeSpec]
    held_out: list[EpisodeSpec]
    setting: ServedSetting
    """The served profile's ordering and floor (already applied to the episodes)."""
    teacher: str
    """The scaling policy the warm-up imitates: `--teacher`, else the profile's fallback."""


@dataclass(frozen=True)
class WarmUp:
    """The imitation-only model, and what it was trained on."""

    model: Dl2Model
    demonstrations: int
    log: list[dict[str, float]]
    demonstrations_s: float
    imitation_s: float


def build_parser() -> argparse.ArgumentParser:
    """The command line; `evidence/evidence_dl2.py` reads its defaults to rebuild the warm-up."""
    parser = command_line(__doc__)
    parser.add_argument(
        "--profile",
        choices=served_profiles(),
        default="dl2",
        help="the served profile the model is for: its ordering, floor and teacher",
    )
    parser.add_argument(
        "--out", type=Path, default=None, help="default: the profile's shipped model file"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--teacher",
        default=None,
        help="scaling policy to imitate (default: the profile's fallback)",
    )
    parser.add_argument("--jobs", type=int, default=80, help="jobs per episode")
    parser.add_argument("--imitation-epochs", type=int, default=20)
    parser.add_argument("--updates", type=int, default=80, help="PPO updates")
    parser.add_argument("--episodes-per-update", type=int, default=2)
    parser.add_argument(
        "--validate-every", type=int, default=5, help="updates between checkpoint scorings"
    )
    parser.add_argument(
        "--reward",
        choices=REWARDS,
        default="progress",
        help="what a round's reward measures: the paper's summed progress, or minus the "
        "jobs' time in the system (whose sum is minus their summed JCT)",
    )
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: tiny episodes and budgets"
    )
    add_runner_arguments(
        parser, default_processes=1, what="simulated episodes of RL and the verdict"
    )
    return parser


def budget(args: argparse.Namespace) -> Budget:
    """The default windows and budgets, or the smoke run's first few at 20 jobs each."""
    jobs = 20 if args.quick else int(args.jobs)
    setting = ServedSetting.of(args.profile)
    teacher = args.teacher or setting.teacher
    train = setting.applied(training_episodes(jobs))
    validation = setting.applied(validation_episodes(jobs))
    held_out = setting.applied(held_out_episodes(jobs))
    if args.quick:
        return Budget(jobs, 2, 2, train[:2], validation[:1], held_out[:1], setting, teacher)
    epochs, updates = int(args.imitation_epochs), int(args.updates)
    return Budget(jobs, epochs, updates, train, validation, held_out, setting, teacher)


def out_path(args: argparse.Namespace) -> Path:
    """`--out`, else the file the profile's scaling policy serves as its shipped model."""
    if args.out is not None:
        return Path(args.out)
    return SHIPPED_DIR / ServedSetting.of(args.profile).shipped_file


def warm_up(
    train: Sequence[EpisodeSpec],
    teacher: str,
    epochs: int,
    seed: int,
    *,
    floor: FloorParams = DEFAULT_FLOOR,
) -> WarmUp:
    """Steps 1–2: the teacher's simulated decisions on `train`, imitated (one torch thread);
    `floor` is the teacher's and the model's (:class:`FloorParams`). The
    teacher plays behind the episodes' ordering (:attr:`EpisodeSpec.ordering`), which
    `train`'s episodes share."""
    config = Dl2Config(families=tuple(FAMILY_SOURCES))
    ordering = train[0].ordering if train else None
    if any(spec.ordering != ordering for spec in train):
        raise ValueError("the training episodes must share one ordering")
    with one_thread():
        clock = time.perf_counter()
        teaching = teacher_profile(teacher, floor=floor, ordering=ordering)
        records = simulated_records(train, teaching)
        data = demonstrations(records, config, floor=floor)
        demonstrations_s = time.perf_counter() - clock
        clock = time.perf_counter()
        model = Dl2Model.initial(config, seed=seed)
        log = imitate(model, data, ImitationArgs(epochs=epochs, seed=seed))
        imitation_s = time.perf_counter() - clock
    return WarmUp(model, len(data), log, demonstrations_s, imitation_s)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    run = budget(args)
    epochs, updates = run.imitation_epochs, run.updates
    train, validation, held_out = run.train, run.validation, run.held_out
    floor, ordering, teacher = run.setting.floor, run.setting.ordering, run.teacher
    out = out_path(args)
    timings: dict[str, float] = {}
    started = time.perf_counter()
    print(
        f"profile {args.profile}: ordering {ordering.name}, floor {floor.model_dump()}, "
        f"teacher {teacher} scaling",
        flush=True,
    )

    warmed = warm_up(train, teacher, epochs, args.seed, floor=floor)
    warm = warmed.model
    timings["demonstrations_s"] = warmed.demonstrations_s
    timings["imitation_s"] = warmed.imitation_s
    print(
        f"demonstrations: {warmed.demonstrations} inferences from {len(train)} episodes "
        f"of {teacher} ({warmed.demonstrations_s:.1f} s)",
        flush=True,
    )
    if warmed.log:
        print(
            f"imitation: {epochs} epochs, loss {warmed.log[-1]['loss']:.3f}, accuracy "
            f"{warmed.log[-1]['accuracy']:.3f} ({warmed.imitation_s:.1f} s)",
            flush=True,
        )

    clock = time.perf_counter()
    tuned = Dl2Model.from_bytes(warm.to_bytes())
    ppo = PpoArgs(
        seed=args.seed,
        updates=updates,
        episodes_per_update=args.episodes_per_update,
        validate_every=args.validate_every,
        floor=floor,
        reward=args.reward,
    )

    def show(row: dict[str, float]) -> None:
        print(
            f"  update {int(row['update']):3d}: reward/round {row['mean_reward']:.3f}  "
            f"avg JCT {row['avg_jct_s']:7.0f} s  policy {row['policy_loss']:+.4f}  "
            f"value {row['value_loss']:.4f}  entropy {row['entropy']:.3f}  "
            f"KL {row['approx_kl']:.4f}  clip {row['clipfrac']:.3f}  "
            f"EV {row['explained_variance']:+.2f}  {row['seconds']:.1f} s"
            + (
                f"  validation {row['validation_avg_jct_s']:.0f} s"
                if "validation_avg_jct_s" in row
                else ""
            ),
            flush=True,
        )

    print(f"PPO: {updates} updates x {args.episodes_per_update} episodes", flush=True)
    runner = runner_from_args(args)
    with runner.started():
        train_ppo(tuned, train, ppo, validation=validation, on_update=show, runner=runner)
        timings["rl_s"] = time.perf_counter() - clock

        clock = time.perf_counter()
        with one_thread():
            verdict = compare(tuned, warm, held_out, runner=runner, floor=floor)
            baselines: list[Score] = [
                score(
                    teacher_profile(name, floor=floor, ordering=ordering),
                    held_out,
                    name=f"{name} scaling",
                    runner=runner,
                )
                for name in (teacher, "as_requested")
            ] + [
                score(name, held_out, name=f"profile {name}", runner=runner)
                for name in ("drf", "optimus")
            ]
        timings["evaluation_s"] = time.perf_counter() - clock
    shipped = tuned if verdict.candidate_wins else warm
    print(f"held-out ({len(held_out)} episodes), mean of average JCTs:")
    print(f"  {'DL2, RL-tuned':22s} {verdict.candidate.mean_avg_jct_s:8.0f} s")
    print(f"  {'DL2, imitation only':22s} {verdict.incumbent.mean_avg_jct_s:8.0f} s")
    for baseline in baselines:
        print(f"  {baseline.name:22s} {baseline.mean_avg_jct_s:8.0f} s")
    print(f"shipping the {'RL-tuned' if verdict.candidate_wins else 'imitation'} model")

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_bytes(shipped.to_bytes())
    timings["total_s"] = time.perf_counter() - started
    print(f"wrote {out} ({out.stat().st_size} bytes)")
    print("timings: " + json.dumps({k: round(v, 1) for k, v in timings.items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
