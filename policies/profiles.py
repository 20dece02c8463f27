"""Profiles: named pipelines of one policy per stage, with parameters.

A profile is data. The built-in ones are below; more can be loaded from a JSON
or TOML file (`ARBITER_PROFILES_FILE`), which may also override a built-in of
the same name. Profiles are checked against the registry when loaded, so a
typo in a policy or parameter name fails at start-up, not on the first request.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError

from policies.decision import ENGINE_STAGES, Stage
from policies.protocols import policy_gathers, policy_settles
from policies.registry import Registry


class _Config(BaseModel):
    """Profiles are configuration, read once at start-up: pydantic, for its rich errors."""

    model_config = ConfigDict(frozen=True, extra="forbid")


class PolicyChoice(_Config):
    name: str
    params: dict[str, JsonValue] = Field(default_factory=dict)


class Profile(_Config):
    name: str = Field(min_length=1, pattern=r"^[a-z0-9][a-z0-9_.-]*$")
    description: str = ""
    admission: PolicyChoice = PolicyChoice(name="accept_all")
    ordering: PolicyChoice = PolicyChoice(name="fifo")
    scaling: PolicyChoice = PolicyChoice(name="as_requested")
    placement: PolicyChoice = PolicyChoice(name="consolidated")
    reclaim: PolicyChoice = Field(
        default=PolicyChoice(name="fewest_jobs"),
        description="Answers POST /v1/reclaim (loaned servers going back); not a decide stage.",
    )
    dispatch: PolicyChoice = Field(
        default=PolicyChoice(name="edf"),
        description=(
            "Answers POST /v1/dispatch (inference onto sub-accelerators); not a decide stage."
        ),
    )
    fallback: dict[Stage, PolicyChoice] = Field(
        default_factory=dict,
        description="Heuristic per stage used when the stage's policy cannot answer.",
    )

    def choice(self, stage: Stage) -> PolicyChoice:
        return {
            Stage.ADMISSION: self.admission,
            Stage.ORDERING: self.ordering,
            Stage.SCALING: self.scaling,
            Stage.PLACEMENT: self.placement,
            Stage.RECLAIM: self.reclaim,
            Stage.DISPATCH: self.dispatch,
        }[stage]


BUDGET_FALLBACK: Mapping[Stage, PolicyChoice] = {
    Stage.ADMISSION: PolicyChoice(name="accept_all"),
    Stage.ORDERING: PolicyChoice(name="fifo", params={"backfill": True}),
    Stage.SCALING: PolicyChoice(name="as_requested"),
    Stage.PLACEMENT: PolicyChoice(name="first_fit"),
}
"""What finishes a stage whose policy ran past a decision's CPU budget, where the
profile names no fallback of its own: each stage's plainest heuristic, linear in
the jobs (the engine's `cpu_budget_s`; the service's ARBITER_DECISION_CPU_BUDGET_MS)."""


class ProfileError(ValueError):
    """A profile that names an unknown policy or bad parameters."""


def builtin_profiles() -> list[Profile]:
    def choice(name: str, **params: JsonValue) -> PolicyChoice:
        return PolicyChoice(name=name, params=dict(params))

    return [
        Profile(
            name="fifo",
            description="First come, first served; strict order (no backfill).",
        ),
        Profile(
            name="sjf",
            description="Shortest job first by estimated duration; strict order.",
            ordering=choice("sjf"),
        ),
        Profile(
            name="srtf",
            description="Shortest remaining time first, preemptive.",
            ordering=choice("srtf"),
        ),
        Profile(
            name="tiresias",
            description=(
                "Tiresias discretized 2D-LAS: attained GPU-service queues, preemptive; a job "
                "resumed over several nodes moves onto one once a node has room."
            ),
            ordering=choice("tiresias"),
            placement=choice("consolidated", gather_spread_jobs=True),
        ),
        Profile(
            name="drf",
            description="Dominant resource fairness across tenants sets elastic jobs' workers.",
            scaling=choice("drf"),
        ),
        Profile(
            name="optimus",
            description="Optimus: workers go where they cut remaining time the most.",
            ordering=choice("srtf"),
            scaling=choice("optimus"),
        ),
        Profile(
            name="dl2",
            description=(
                "DL2: a policy network (trained by imitating DRF, then by RL in the "
                "simulator) adds workers and parameter servers step by step; FIFO with "
                "backfill. Falls back to DRF when the model is missing, invalid or slow."
            ),
            ordering=choice("fifo", backfill=True),
            scaling=choice("dl2"),
            fallback={Stage.SCALING: choice("drf")},
        ),
        Profile(
            name="dl2-srtf",
            description=(
                "DL2 behind SRTF (preemptive, reads duration estimates): every waiting job "
                "gets its minimum even over a full pool, then a policy network trained in "
                "that setting (imitating Optimus, then RL) adds workers and parameter "
                "servers. Falls back to Optimus scaling with the same floor."
            ),
            ordering=choice("srtf"),
            scaling=choice("dl2_srtf", minimum_when_full=True),
            fallback={Stage.SCALING: choice("optimus", minimum_when_full=True)},
        ),
        Profile(
            name="fifo-backfill",
            description="FIFO that lets later jobs start when the head does not fit.",
            ordering=choice("fifo", backfill=True),
        ),
        Profile(
            name="quota",
            description="Per-tenant GPU quota admission, FIFO with backfill.",
            admission=choice("quota"),
            ordering=choice("fifo", backfill=True),
        ),
        Profile(
            name="load-threshold",
            description="Admit while committed GPU demand is under 1.5x capacity; FIFO, backfill.",
            admission=choice("load_threshold"),
            ordering=choice("fifo", backfill=True),
        ),
        Profile(
            name="oasis",
            description=(
                "OASiS: admit a job if its best schedule's utility beats its cost at "
                "exponential resource prices; run the committed schedule. FIFO, backfill. "
                "Stateful: keeps committed schedules per cluster."
            ),
            admission=choice("oasis"),
            ordering=choice("fifo", backfill=True),
            scaling=choice("oasis"),
        ),
        Profile(
            name="spread",
            description="FIFO with spread placement (one worker per node first).",
            placement=choice("spread"),
        ),
        Profile(
            name="first-fit",
            description="FIFO with first-fit placement in node order.",
            placement=choice("first_fit"),
        ),
        Profile(
            name="random",
            description="FIFO with seeded random placement.",
            placement=choice("random"),
        ),
        Profile(
            name="aryl",
            description=(
                "Aryl: extra workers for elastic jobs by a knapsack on remaining-time "
                "reduction, placed on loaned inference servers; reclaim by least preemption "
                "cost. FIFO with backfill."
            ),
            ordering=choice("fifo", backfill=True),
            scaling=choice("aryl"),
            placement=choice("loan_aware"),
            reclaim=choice("aryl"),
        ),
        Profile(
            name="static",
            description=(
                "Aryl's baseline: inference servers never lent (training stays in its pool), "
                "jobs run as requested; FIFO with backfill, fewest-jobs reclaim."
            ),
            ordering=choice("fifo", backfill=True),
            placement=choice("loan_aware", use_loaned=False),
            reclaim=choice("fewest_jobs"),
        ),
        Profile(
            name="dual-agent",
            description=(
                "Dual agent (KDD 2023): a learned, equivariant ordering agent and the RWGP "
                "placement agent (a GP over machines fed by throughput feedback, a learned "
                "risk attitude, speed per dollar), trained jointly to cut fee and JCT; "
                "jobs run as requested. Falls back to Tiresias with consolidated placement "
                "when the model is missing, invalid or slow."
            ),
            ordering=choice("dual_agent"),
            placement=choice("rwgp"),
            fallback={Stage.ORDERING: choice("tiresias"), Stage.PLACEMENT: choice("consolidated")},
        ),
        Profile(
            name="hetero-greedy",
            description=(
                "Tiresias ordering with heterogeneity-aware greedy placement: the fastest "
                "free GPUs per dollar by the true speed table (the dual agent's baseline)."
            ),
            ordering=choice("tiresias"),
            placement=choice("hetero_greedy"),
        ),
        *_dispatch_profiles(choice),
    ]


def _dispatch_profiles(choice: Callable[..., PolicyChoice]) -> list[Profile]:
    """Profiles named after their dispatch policy (POST /v1/dispatch, docs/relmas.md).

    Their other stages are the defaults (FIFO, consolidated): a profile answers every
    call, and these are meant for dispatch.
    """
    return [
        Profile(
            name="fcfs",
            description="Dispatch: oldest request first, each on the fastest idle sub-accelerator.",
            dispatch=choice("fcfs"),
        ),
        Profile(
            name="edf",
            description="Dispatch: earliest deadline first, on the fastest idle sub-accelerator.",
            dispatch=choice("edf"),
        ),
        Profile(
            name="llf",
            description="Dispatch: least laxity first, on the fastest idle sub-accelerator.",
            dispatch=choice("llf"),
        ),
        Profile(
            name="eft-greedy",
            description=(
                "Dispatch: by deadline, each layer where it finishes earliest, busy "
                "sub-accelerators and DRAM bandwidth contention counted."
            ),
            dispatch=choice("eft_greedy"),
        ),
        Profile(
            name="prema",
            description=(
                "Dispatch: PREMA token priority; candidates run shortest remaining first."
            ),
            dispatch=choice("prema"),
        ),
        Profile(
            name="relmas",
            description=(
                "Dispatch: RELMAS, a policy network trained by RL in the accelerator "
                "simulator scores (request, sub-accelerator) pairs. Falls back to EDF when "
                "the model is missing, invalid or slow."
            ),
            dispatch=choice("relmas"),
            fallback={Stage.DISPATCH: choice("edf")},
        ),
    ]


def dispatch_profile_names() -> frozenset[str]:
    """The built-in profiles that exist to answer POST /v1/dispatch.

    Their decide stages are the defaults, the same as `fifo`'s, so a comparison of
    scheduling profiles leaves them out.
    """
    return frozenset(
        profile.name
        for profile in _dispatch_profiles(
            lambda name, **params: PolicyChoice(name=name, params=params)
        )
    )


def check_profile(profile: Profile, registry: Registry) -> None:
    """Raise ProfileError unless every policy and parameter of `profile` is known."""
    choices = [(stage, profile.choice(stage)) for stage in Stage]
    choices += list(profile.fallback.items())
    for stage, chosen in choices:
        try:
            registry.spec(stage, chosen.name).parse_params(chosen.params)
        except (LookupError, ValueError) as error:
            raise ProfileError(f"profile {profile.name!r}: {error}") from error


def profile_settles(profile: Profile, registry: Registry) -> bool:
    """Whether the profile's pipeline settles (:attr:`policies.engine.Pipeline.settles`),
    from its policies' classes, without building them: each stage's policy and every
    fallback that may answer for a stage, the CPU budget's included."""
    chosen = [(stage, profile.choice(stage).name) for stage in ENGINE_STAGES]
    chosen += [
        (stage, choice.name)
        for stage, choice in {**BUDGET_FALLBACK, **profile.fallback}.items()
        if stage in ENGINE_STAGES
    ]
    return all(policy_settles(registry.spec(stage, name).cls) for stage, name in chosen)


def profile_gathers(profile: Profile, registry: Registry) -> bool:
    """Whether the profile's placement, or its placement fallback, moves running jobs
    spread over several nodes onto one (:attr:`policies.engine.Pipeline.gathers`).
    Only placements that can gather are built to ask (a parameter decides)."""
    choices = [profile.placement, profile.fallback.get(Stage.PLACEMENT)]
    return any(
        policy_gathers(registry.placement(choice.name, choice.params))
        for choice in choices
        if choice is not None and hasattr(registry.spec(Stage.PLACEMENT, choice.name).cls, "gather")
    )


def load_profiles(registry: Registry, path: Path | None = None) -> dict[str, Profile]:
    """Built-in profiles, overridden and extended by `path` (JSON or TOML) when given.

    The file holds `{"profiles": [{"name": …, "ordering": {"name": …, "params": {…}}, …}]}`.
    """
    profiles = {p.name: p for p in builtin_profiles()}
    if path is not None:
        for profile in _read_profile_file(path):
            profiles[profile.name] = profile
    for profile in profiles.values():
        check_profile(profile, registry)
    return profiles


def _read_profile_file(path: Path) -> list[Profile]:
    text = path.read_text(encoding="utf-8")
    try:
        raw: object = tomllib.loads(text) if path.suffix == ".toml" else json.loads(text)
    except (tomllib.TOMLDecodeError, json.JSONDecodeError) as error:
        raise ProfileError(
            f"{path}: not valid {path.suffix.lstrip('.') or 'JSON'}: {error}"
        ) from error
    if not isinstance(raw, Mapping) or not isinstance(raw.get("profiles"), list):
        raise ProfileError(f"{path}: expected an object with a 'profiles' list")
    out = []
    for i, item in enumerate(raw["profiles"]):
        try:
            out.append(Profile.model_validate(item))
        except ValidationError as error:
            raise ProfileError(f"{path}: profiles[{i}]: {error}") from error
    return out
