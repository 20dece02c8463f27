"""Train the RELMAS model shipped with Arbiter in the accelerator simulator, and write it.

    .venv/bin/python -m evidence.train_relmas                  # writes the shipped model
    .venv/bin/python -m evidence.train_relmas --quick --out /tmp/relmas.safetensors

Imitation of the teacher, then REINFORCE, then the best checkpoint on validation seeds
(training.relmas.train; docs/relmas.md, "Training"). Prints the validation score of
every checkpoint and the time taken; deterministic for `--seed`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import torch

from evidence.runner import ROOT, command_line
from training.relmas.train import Args, train

SHIPPED = ROOT / "policies" / "learned" / "relmas" / "default" / "relmas.safetensors"


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--out", type=Path, default=SHIPPED)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a smoke-sized run (seconds)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)  # one core: the machine is shared, the network small
    budget = Args(seed=args.seed)
    if args.quick:
        budget = dataclasses.replace(
            budget,
            imitation_episodes=1,
            imitation_epochs=1,
            imitation_rounds_per_epoch=200,
            updates=1,
            episodes_per_update=1,
            rounds_per_update=200,
            validation_episodes=1,
            scenarios=("heavy-mixed",),
        )
    report = train(budget)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(report.model.to_bytes())
    print(
        json.dumps(
            {
                "budget": dataclasses.asdict(budget),
                "imitation_loss": [round(x, 4) for x in report.imitation_loss],
                "validation_sla": {k: round(v, 4) for k, v in report.validation.items()},
                "teacher_validation_sla": round(report.teacher_validation, 4),
                "chosen": report.chosen,
                "seconds": round(report.seconds, 1),
                "out": str(
                    args.out.relative_to(ROOT) if args.out.is_relative_to(ROOT) else args.out
                ),
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
