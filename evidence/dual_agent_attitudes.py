"""Fee and JCT margins of dual-agent attitudes against both baselines, on training windows
(`make dual-agent-attitudes`).

A model's ordering network and GP are served as they are, with its patience θ, value
of time λ and risk κ set to each attitude given; every attitude and both baselines
(Tiresias with consolidated placement, the greedy baseline) play the same runs, the 12
training windows at seeds `seed + offset + step * r` for `r` below `repetitions`.
Prints one row per attitude: the dual agent minus each baseline, mean ± standard error of
the per-run differences. The exploration and checks behind docs/dual-agent.md's
*Evaluation protocol* are this command (defaults: seeds offset 20,000, step 100, two
repetitions: no search's and no held-out run's); `--offset 5000 --step 5000` plays the
attitude search's own runs.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from evidence.evidence_dual_agent import paired
from policies.learned.dual_agent.network import DualAgentModel
from policies.learned.dual_agent.shipped import shipped_model
from training.dl2.episodes import EpisodeSpec
from training.dual_agent.attitude_fit import (
    BASELINES,
    attitude,
    baseline_plays,
    fees_and_jcts,
    play,
    set_attitude,
)
from training.dual_agent.episodes import training_episodes
from training.dual_agent.evaluation import decider

JCT_WEIGHT = 2.0

Attitude = tuple[float | None, float | None, float | None]
"""(θ, λ, κ); None keeps the model's own."""


def runs(offset: int, step: int, repetitions: int, jobs: int = 60) -> list[EpisodeSpec]:
    return [
        dataclasses.replace(episode, seed=episode.seed + offset + step * r)
        for r in range(repetitions)
        for episode in training_episodes(jobs)
    ]


def _difference(ours: list[float], theirs: list[float]) -> str:
    mean, se = paired(ours, theirs)
    return f"{mean:+,.1f} ± {se:,.1f}"


def margins(
    model: DualAgentModel, attitudes: Sequence[Attitude], episodes: Sequence[EpisodeSpec]
) -> list[str]:
    """A Markdown table: per attitude, fee and mean JCT minus each baseline's."""
    baselines = baseline_plays(episodes, JCT_WEIGHT)
    header = " | ".join(f"fee − {p} (USD) | JCT − {p} (s)" for p in BASELINES)
    rows = [f"| θ | λ ($/GPU-h) | κ | {header} |", "|---:|---:|---:|" + "---|---|" * 2]
    for wanted in attitudes:
        served = copy.deepcopy(model)
        for name, value in zip(("patience", "time_value", "risk"), wanted, strict=True):
            if value is not None:
                set_attitude(served, name, value)
        fee, jct = fees_and_jcts(play(decider(served), episodes, JCT_WEIGHT))
        own = attitude(served)
        cells = " | ".join(
            f"{_difference(fee, their_fee)} | {_difference(jct, their_jct)}"
            for their_fee, their_jct in baselines
        )
        rows.append(
            f"| {own['patience']:.2f} | {own['time_value']:.2f} | {own['risk']:.2f} | {cells} |"
        )
    return rows


def _attitude(text: str) -> Attitude:
    """'θ,λ,κ', each a number or '-' (the model's own)."""
    parts = text.split(",")
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"{text!r}: expected θ,λ,κ (use - to keep one)")
    try:
        values = [None if part.strip() == "-" else float(part) for part in parts]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"{text!r}: {error}") from None
    return values[0], values[1], values[2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", type=Path, help="safetensors file (default: the shipped one)")
    parser.add_argument(
        "--attitude",
        type=_attitude,
        action="append",
        help="θ,λ,κ to serve, '-' keeping the model's own (repeatable; default: its own)",
    )
    parser.add_argument("--offset", type=int, default=20_000)
    parser.add_argument("--step", type=int, default=100)
    parser.add_argument("--repetitions", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    model = (
        DualAgentModel.from_bytes(args.model.read_bytes())
        if args.model is not None
        else shipped_model().model
    )
    episodes = runs(args.offset, args.step, args.repetitions)
    table = margins(model, args.attitude or [(None, None, None)], episodes)
    print("\n".join(table))
    print(f"({len(episodes)} runs per row)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
