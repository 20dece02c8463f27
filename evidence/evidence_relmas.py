"""Evidence for RELMAS: SLA satisfaction against every baseline, beside the paper.

    .venv/bin/python -m evidence.evidence_relmas            # section `relmas` of docs/results.md
    .venv/bin/python -m evidence.evidence_relmas --seeds 1 --out /tmp/results.md

Blanco et al., RELMAS (DAC 2024), report up to +173 % SLA satisfaction rate against
state-of-the-art schedulers with < 1.5 % energy overhead. This script runs every named
scenario of the accelerator simulator (docs/relmas.md) over `--seeds` seeds (0, 1, …;
the trainer never sees them) under `relmas` and every dispatch baseline, through the
same code the service calls, and writes: SLA satisfaction per scenario (mean and
range over seeds); for every scenario and profile, per-tenant satisfaction, each
sub-accelerator's utilisation, energy per request and decision time; our relative
improvement over the best baseline and RELMAS's energy per request against that
baseline's. Plots of SLA satisfaction over load, per tenant, and of utilisation go to
docs/img/relmas_*.png. Deterministic but for the timings.
"""

from __future__ import annotations

import platform
from collections.abc import Sequence
from typing import Any

import torch

from evidence.runner import Stopwatch, add_out, command_line, machine, write_section
from policies.learned.relmas.shipped import shipped_model
from simulator.accelerator.cli import simulate
from simulator.accelerator.report import write_plots
from simulator.accelerator.workload import scenarios

PROFILES = ("relmas", "eft-greedy", "prema", "edf", "llf", "fcfs")
BASELINES = PROFILES[1:]
ORDER = (
    "light-homogeneous",
    "medium-homogeneous",
    "heavy-homogeneous",
    "light-mixed",
    "medium-mixed",
    "heavy-mixed",
)


def _cell(row: dict[str, Any], key: str = "sla_satisfaction") -> str:
    values = [r[key] for r in row["runs"]]
    return f"{row[key]:.3f} ({min(values):.2f}–{max(values):.2f})"


def section(rows: list[dict[str, Any]], seeds: list[int], wall_s: float, cpu_s: float) -> str:
    by = {(r["scenario"], r["profile"]): r for r in rows}
    table = scenarios()
    lines = [
        "## RELMAS: SLA satisfaction of inference dispatch against five baselines",
        "",
        "`make results-relmas` (evidence/evidence_relmas.py). Every named scenario of the "
        "accelerator simulator (docs/relmas.md: two weight-stationary, one output-stationary "
        "and one row-stationary sub-accelerator sharing 256 GB/s of DRAM; MAESTRO per-layer "
        "costs; arrivals shaped on the GenAI gateway's QPS; deadlines 4x, 8x and 16x the "
        "isolated best time for the interactive, standard and batch tenants), "
        f"seeds {seeds} (unseen in training), shipped model `{shipped_model().version}`. "
        "Cells: mean over seeds (min–max).",
        "",
        "| scenario | load ρ | " + " | ".join(PROFILES) + " |",
        "|---|---|" + "---|" * len(PROFILES),
    ]
    for name in ORDER:
        cells = [_cell(by[(name, p)]) for p in PROFILES]
        lines.append(f"| {name} | {table[name].load} | " + " | ".join(cells) + " |")
    tenants = sorted({t for r in rows for t in r["sla_by_tenant"]})
    accelerators = sorted({a for r in rows for a in r["utilization"]})
    lines += [
        "",
        "Every scenario, per tenant: SLA satisfaction overall and of each tenant, "
        "utilisation of each sub-accelerator (busy share of the makespan) and their mean, "
        "energy per request, share of time over the DRAM budget, decision time per "
        "round (in process, this machine, during the run) and the share of rounds the "
        "fallback (EDF) answered because RELMAS's round ran over its latency budget. "
        "Means over the seeds.",
        "",
        "| scenario | profile | SLA | "
        + " | ".join(f"SLA {t}" for t in tenants)
        + " | "
        + " | ".join(f"util {a}" for a in accelerators)
        + " | util mean | energy mJ/request | over DRAM budget | decision p50 / p99 ms "
        "| rounds by EDF |",
        "|---|---|---|" + "---|" * (len(tenants) + len(accelerators) + 5),
    ]
    for name in ORDER:
        for p in PROFILES:
            r = by[(name, p)]
            lines.append(
                f"| {name} | {p} | {r['sla_satisfaction']:.3f} | "
                + " | ".join(f"{r['sla_by_tenant'].get(t, float('nan')):.3f}" for t in tenants)
                + " | "
                + " | ".join(f"{r['utilization'].get(a, float('nan')):.2f}" for a in accelerators)
                + f" | {r['mean_utilization']:.2f} | {r['energy_per_request_mj']:.2f} | "
                f"{r['bandwidth_saturated_share']:.2f} | "
                f"{r['decision_ms_p50']:.3f} / {r['decision_ms_p99']:.3f} | "
                f"{r['fallbacks'] / max(r['rounds'], 1):.2%} |"
            )
    lines += ["", "**Against the paper.**", ""]
    slow_shares = "; ".join(
        f"`{name}`: "
        + ", ".join(
            f"{p} {1 - by[(name, p)]['layer_share_by_style'].get('ws', 0.0):.0%}"
            for p in ("relmas", "prema", "eft-greedy")
        )
        for name in ("heavy-homogeneous", "heavy-mixed")
    )
    for name in ("heavy-mixed", "heavy-homogeneous", "medium-mixed"):
        best = max(BASELINES, key=lambda p: by[(name, p)]["sla_satisfaction"])
        worst = min(BASELINES, key=lambda p: by[(name, p)]["sla_satisfaction"])
        ours = by[(name, "relmas")]
        gain = ours["sla_satisfaction"] / max(by[(name, best)]["sla_satisfaction"], 1e-9) - 1
        top = ours["sla_satisfaction"] / max(by[(name, worst)]["sla_satisfaction"], 1e-9) - 1
        energy = ours["energy_per_request_mj"] / by[(name, best)]["energy_per_request_mj"] - 1
        lines.append(
            f"- `{name}`: RELMAS {ours['sla_satisfaction']:.3f} against the best baseline "
            f"`{best}` {by[(name, best)]['sla_satisfaction']:.3f}: **{gain:+.0%}** "
            f"(against the worst, `{worst}`: {top:+.0%}); energy per request "
            f"{energy:+.1%} against `{best}`."
        )
    lines += [
        "",
        "The paper reports up to **+173 %** SLA satisfaction against state-of-the-art "
        "schedulers with **< 1.5 %** energy overhead. Which schedulers those were, and "
        "at which load, is not known here (the full text is not available), so the "
        "figures above are set beside it, not matched to it: our +173 %-style figure "
        "is the gain over the *worst* baseline of a scenario, the honest headline is the "
        "gain over the *best*. Where the gain comes from: "
        "RELMAS learned, from its teacher, to serve first the requests that can still "
        "make their deadline and to leave the hopeless ones for later, and to take the "
        "layer's best style even when it means waiting for it; EDF, LLF and PREMA spend "
        "the fast sub-accelerators on requests already lost under overload, and every "
        "list baseline takes the first idle sub-accelerator, often a style five times "
        "slower for that layer. The bandwidth-aware greedy avoids the second mistake, "
        "not the first. In the light scenarios there is little to gain and RELMAS can "
        "be slightly below the greedy. Energy: RELMAS's reward has no energy term, and "
        "the share of layers each policy runs on the low-bandwidth styles `os` and `rs` "
        f"differs ({slow_shares}), whose energy per layer is 1.5–5.6 times that of "
        "`ws` for these models (MAESTRO's activity counts); where RELMAS's energy "
        "overhead is well over the paper's < 1.5 %, an energy term in the reward would "
        "be the next step. "
        "The RL stage of "
        "training did not beat its imitation checkpoint within the budget "
        '(docs/relmas.md, "Training"), so the shipped network is mostly its teacher\'s '
        "policy, distilled. Runs are deterministic but for one thing: a RELMAS round over "
        "its latency budget (50 ms; a loaded machine's stall) is answered by EDF, as it "
        "would be when served, so reruns on a busy machine can differ slightly "
        "(`heavy-mixed` from 0.807 to 0.818 in four runs of this script; the table's "
        "last column counts those rounds).",
        "",
        "![SLA satisfaction over load](img/relmas_sla_over_load.png)",
        "",
        "![SLA satisfaction per tenant](img/relmas_sla_by_tenant.png)",
        "",
        "![Utilisation of each sub-accelerator](img/relmas_utilization.png)",
        "",
        f"Run: {len(rows) * len(seeds)} episodes in {wall_s:.0f} s wall, {cpu_s:.0f} s CPU, on "
        f"{machine()} ({platform.python_version()}), one torch thread.",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = command_line(__doc__)
    parser.add_argument("--seeds", type=int, default=3)
    add_out(parser)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    seeds = list(range(args.seeds))
    clock = Stopwatch()
    rows = simulate(list(ORDER), list(PROFILES), seeds)
    wall, cpu = clock.wall_s, clock.cpu_s
    loads = {n: s.load for n, s in scenarios().items()}
    image_dir = args.out.parent / "img"
    image_dir.mkdir(parents=True, exist_ok=True)
    for plot in write_plots(rows, loads, image_dir).values():
        plot.rename(image_dir / f"relmas_{plot.name}")
    write_section(args.out, "relmas", section(rows, seeds, wall, cpu))
    print(section(rows, seeds, wall, cpu))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
