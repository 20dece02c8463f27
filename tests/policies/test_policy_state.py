"""The policy-state mechanism of the engine (DESIGN §5): keys in, updates out, nothing kept."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, cast

import pytest
from pydantic import JsonValue

from policies.decision import AdmissionResult, Decision, ScalingResult, Stage, Verdict
from policies.engine import Fallbacks, Pipeline, PolicyFault
from policies.model import Job
from policies.profiles import PolicyChoice, Profile, load_profiles
from policies.protocols import AdmissionPolicy, Context, NoParams, StatefulPolicy, StateValue
from policies.registry import PolicySpec, Registry, build_registry
from tests.policies.builders import job, node, snap

SEEN: list[dict[str, StateValue]] = []


class CountingAdmission:
    """Admits everything; writes how many rounds it has seen under "rounds"."""

    name: ClassVar[str] = "counting"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.ADMISSION
    summary: ClassVar[str] = "test"
    source: ClassVar[str] = "test"
    Params: ClassVar[type[NoParams]] = NoParams
    state_key: ClassVar[str] = "rounds"

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def admit(self, ctx: Context, jobs: Sequence[Job]) -> list[AdmissionResult]:
        SEEN.append(dict(ctx.state))
        return [
            AdmissionResult(job_id=j.id, verdict=Verdict.ADMIT, reason="ok", details={"n": 1})
            for j in jobs
        ]

    def commit(self, ctx: Context, decision: Decision) -> JsonValue:
        count = ctx.state.get(self.state_key, 0)
        assert isinstance(count, int)
        return count + 1


class ReadingScaling:
    """Reads the "rounds" key and this round's verdicts; writes nothing."""

    name: ClassVar[str] = "reading"
    version: ClassVar[str] = "1"
    stage: ClassVar[Stage] = Stage.SCALING
    summary: ClassVar[str] = "test"
    source: ClassVar[str] = "test"
    Params: ClassVar[type[NoParams]] = NoParams
    state_key: ClassVar[str] = "rounds"

    def __init__(self, params: NoParams) -> None:
        self.params = params

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        rounds = ctx.state.get(self.state_key, 0)
        return [
            ScalingResult(
                job_id=j.id,
                workers=j.workers,
                reason=f"rounds={rounds} admitted-now={j.id in ctx.admission}",
            )
            for j in jobs
        ]


class BrokenCommit(CountingAdmission):
    name: ClassVar[str] = "broken"

    def commit(self, ctx: Context, decision: Decision) -> JsonValue:
        raise RuntimeError("disk on fire")


class SecondWriter(CountingAdmission):
    name: ClassVar[str] = "second"
    stage: ClassVar[Stage] = Stage.SCALING

    def scale(self, ctx: Context, jobs: Sequence[Job]) -> list[ScalingResult]:
        return [ScalingResult(job_id=j.id, workers=j.workers) for j in jobs]


REGISTRY = Registry(
    [
        *build_registry().specs(),
        PolicySpec(CountingAdmission),
        PolicySpec(ReadingScaling),
        PolicySpec(BrokenCommit),
        PolicySpec(SecondWriter),
    ]
)


def pipeline(admission: str = "counting", scaling: str = "reading") -> Pipeline:
    profile = Profile(
        name="stateful",
        admission=PolicyChoice(name=admission),
        scaling=PolicyChoice(name=scaling),
    )
    return Pipeline.build(profile, REGISTRY)


SNAPSHOT = snap([node("n0")], [job("a", admitted=False), job("b")])


def test_state_keys_list_what_the_policies_read_or_write() -> None:
    assert pipeline().state_keys == ("rounds",)
    builtin = build_registry()
    for profile in load_profiles(builtin).values():
        keys = Pipeline.build(profile, builtin).state_keys
        expected = {
            "oasis": ("oasis",),
            "tiresias": ("tiresias",),
            "hetero-greedy": ("tiresias",),
            "dual-agent": ("rwgp",),
        }.get(profile.name, ())
        assert keys == expected, profile.name


def test_run_passes_the_kept_state_and_returns_the_writers_updates() -> None:
    SEEN.clear()
    first = pipeline().run(SNAPSHOT, decision_id="1")
    assert first.state == {"rounds": 1}
    kept: dict[str, JsonValue] = {"rounds": 41, "someone-else": "untouched"}
    second = pipeline().run(SNAPSHOT, state=kept, decision_id="2")

    assert second.state == {"rounds": 42}
    # Only the pipeline's keys are shown to the policies.
    assert SEEN == [{}, {"rounds": 41}]
    assert kept == {"rounds": 41, "someone-else": "untouched"}


def test_later_stages_see_the_state_and_this_rounds_verdicts() -> None:
    outcome = pipeline().run(SNAPSHOT, state={"rounds": 3})
    reasons = {r.job_id: r.reason for r in outcome.decision.scaling}
    assert reasons == {"a": "rounds=3 admitted-now=True", "b": "rounds=3 admitted-now=False"}
    (entry,) = outcome.decision.admission
    assert entry.details == {"n": 1}


def test_decide_ignores_state_and_commits_nothing() -> None:
    SEEN.clear()
    decision = pipeline().decide(SNAPSHOT, decision_id="x")
    assert decision.admission[0].admitted
    assert SEEN == [{}]


def test_policies_cannot_modify_the_state_they_read() -> None:
    class Vandal(CountingAdmission):
        def admit(self, ctx: Context, jobs: Sequence[Job]) -> list[AdmissionResult]:
            ctx.state["rounds"] = 0  # type: ignore[index]
            return []

    vandal = Pipeline(
        profile=Profile(name="vandal"),
        admission=cast(AdmissionPolicy, Vandal(NoParams())),
        ordering=REGISTRY.ordering("fifo"),
        scaling=REGISTRY.scaling("as_requested"),
        placement=REGISTRY.placement("consolidated"),
        fallbacks=Fallbacks(),
    )
    with pytest.raises(PolicyFault, match="TypeError"):
        vandal.run(SNAPSHOT, state={"rounds": 1})


def test_a_failing_commit_is_a_policy_fault() -> None:
    with pytest.raises(PolicyFault, match="disk on fire"):
        pipeline(admission="broken").run(SNAPSHOT)


def test_two_writers_of_one_key_are_refused() -> None:
    with pytest.raises(ValueError, match="both write state key 'rounds'"):
        pipeline(scaling="second")


def test_stateful_policies_satisfy_the_protocol() -> None:
    assert isinstance(CountingAdmission(NoParams()), StatefulPolicy)
    assert not isinstance(ReadingScaling(NoParams()), StatefulPolicy)
    assert isinstance(build_registry().admission("oasis"), StatefulPolicy)
    assert not isinstance(build_registry().scaling("oasis"), StatefulPolicy)
