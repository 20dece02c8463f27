"""Train the dual-agent model shipped with Arbiter (`make dual-agent-model`).

Runs :func:`training.dual_agent.run.train_dual_agent` from fresh weights with the
trainer's default budget (or the options given), writes the weights to
`policies/learned/dual_agent/default/dual_agent.safetensors` (tensors only) and
prints the run's metrics as JSON. `--updates 200` is the longer run;
`--attitude-fit-passes 0` leaves out the search of the patience, value of time
and risk after MAPPO (`training/dual_agent/ablation/mappo_only.safetensors`).

`--agents ordering` or `--agents placement` trains one agent alone, the other held
at its initial policy (placement: its initial risk and value of time; ordering:
least attained service first), for the ablation "trained separately versus
jointly" (neither runs the attitude search); `--combine ORDERING PLACEMENT`
writes the ordering network of one file with the placement head and GP of the
other.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

from evidence.runner import ROOT
from policies.learned.dual_agent.network import DualAgentModel
from training.dual_agent.run import train_dual_agent
from training.dual_agent.trainer import DualAgentBudget

SHIPPED = ROOT / "policies" / "learned" / "dual_agent" / "default" / "dual_agent.safetensors"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    defaults = DualAgentBudget()
    parser.add_argument("--updates", type=int, default=defaults.updates)
    parser.add_argument("--jobs", type=int, default=defaults.jobs)
    parser.add_argument("--held-out-episodes", type=int, default=defaults.held_out_episodes)
    parser.add_argument("--gp-fit-episodes", type=int, default=defaults.gp_fit_episodes)
    parser.add_argument("--jct-weight", type=float, default=defaults.jct_weight)
    parser.add_argument("--attitude-fit-passes", type=int, default=defaults.attitude_fit_passes)
    parser.add_argument(
        "--attitude-fit-criterion",
        choices=("objective", "weakest-margin", "weakest-share"),
        default=defaults.attitude_fit_criterion,
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", choices=("joint", "ordering", "placement"), default="joint")
    parser.add_argument("--combine", nargs=2, type=Path, metavar=("ORDERING", "PLACEMENT"))
    parser.add_argument("--out", type=Path, default=SHIPPED)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.combine:
        ordering = DualAgentModel.from_bytes(args.combine[0].read_bytes())
        placement = DualAgentModel.from_bytes(args.combine[1].read_bytes())
        combined = DualAgentModel(
            ordering.config,
            ordering=ordering.ordering,
            placement=placement.placement,
            gp=placement.gp,
        )
        args.out.write_bytes(combined.to_bytes())
        return 0
    budget = DualAgentBudget(
        updates=args.updates,
        jobs=args.jobs,
        held_out_episodes=args.held_out_episodes,
        gp_fit_episodes=args.gp_fit_episodes,
        jct_weight=args.jct_weight,
        attitude_fit_passes=args.attitude_fit_passes,
        attitude_fit_criterion=args.attitude_fit_criterion,
    )
    result = train_dual_agent(
        None,
        budget,
        seed=args.seed,
        start="scratch",
        on_progress=lambda stage, fraction: print(
            f"{stage} {fraction:.0%}", file=sys.stderr, flush=True
        ),
        train_ordering=args.agents != "placement",
        train_placement=args.agents != "ordering",
        fixed_ordering="least-attained" if args.agents == "placement" else "model",
    )
    args.out.write_bytes(result.model.to_bytes())
    print(
        json.dumps(
            {"metrics": result.metrics, "log": result.log, "attitude": result.attitude_log},
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
