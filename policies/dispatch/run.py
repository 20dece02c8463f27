"""Run a dispatch policy, check its answer and explain every request.

The one path both `POST /v1/dispatch` and the accelerator simulator take: a policy's
fault (an exception, or an answer that breaks the contract of
:class:`policies.protocols.DispatchPolicy`) hands the round to the profile's fallback
when it has one, and the answer says so; without one it is a
:class:`policies.engine.PolicyFault`. Expected outcomes (waits, deadlines that can no
longer be met) are data: every request gets exactly one entry with one reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from policies.decision import Fallback, Stage
from policies.dispatch.model import (
    DispatchChoice,
    DispatchEntry,
    DispatchResult,
    DispatchSnapshot,
    DispatchStart,
    RequestStatus,
)
from policies.dispatch.view import DispatchView, RequestInfo
from policies.engine import PolicyFault
from policies.learned.models import ModelProvider
from policies.profiles import Profile
from policies.protocols import DispatchPolicy
from policies.registry import Registry


class Dispatches(Protocol):
    """What :func:`run_dispatch` needs of a policy: a name and the dispatch method
    (every :class:`policies.protocols.DispatchPolicy` has both; so do trainers' wrappers)."""

    @property
    def name(self) -> str: ...

    def dispatch(self, view: DispatchView) -> DispatchChoice: ...


def run_dispatch(
    policy: Dispatches,
    snapshot: DispatchSnapshot,
    fallback: Dispatches | None = None,
    view: DispatchView | None = None,
) -> tuple[DispatchResult, Dispatches]:
    """The checked answer to `snapshot` (assumed valid), and the policy that gave it."""
    view = view or DispatchView(snapshot)
    used, fell_back = policy, None
    try:
        choice = _checked(policy, view)
    except PolicyFault as fault:
        if fallback is None:
            raise
        used, fell_back = fallback, Fallback(policy=fallback.name, reason=str(fault))
        choice = _checked(fallback, view)
    return _explained(view, choice, used.name, fell_back), used


def _checked(policy: Dispatches, view: DispatchView) -> DispatchChoice:
    try:
        choice = policy.dispatch(view)
    except Exception as error:
        raise PolicyFault(
            Stage.DISPATCH, policy.name, f"raised {type(error).__name__}: {error}"
        ) from error
    problem = contract_problem(view, choice)
    if problem:
        raise PolicyFault(Stage.DISPATCH, policy.name, problem)
    return choice


def contract_problem(view: DispatchView, choice: DispatchChoice) -> str:
    """What is wrong with `choice` for `view` (empty when nothing is)."""
    ready = {r.id: r for r in view.ready}
    idle = {a.id: a for a in view.idle}
    started: set[str] = set()
    taken: set[str] = set()
    for start in choice.starts:
        info = ready.get(start.request_id)
        if info is None:
            return f"started {start.request_id!r}, which is not a ready request"
        accelerator = idle.get(start.accelerator_id)
        if accelerator is None:
            return f"started a layer on {start.accelerator_id!r}, which is not idle and online"
        if start.request_id in started:
            return f"started {start.request_id!r} twice"
        if start.accelerator_id in taken:
            return f"gave {start.accelerator_id!r} two layers at once"
        if accelerator.style not in info.layer.by_style:
            return (
                f"started layer {info.layer_index} of {start.request_id!r} on "
                f"{start.accelerator_id!r}, whose style {accelerator.style!r} cannot run it"
            )
        started.add(start.request_id)
        taken.add(start.accelerator_id)
    for request_id in choice.reasons:
        if request_id not in ready:
            return f"gave a reason for {request_id!r}, which is not a ready request"
    return ""


def _explained(
    view: DispatchView, choice: DispatchChoice, policy: str, fallback: Fallback | None
) -> DispatchResult:
    starts = {s.request_id: (order, s) for order, s in enumerate(choice.starts)}
    entries: list[DispatchEntry] = []
    late: list[str] = []
    for info in view.requests:
        finish = view.now + info.best_remaining_s
        if not info.feasible:
            late.append(info.id)
        started = starts.get(info.id)
        if info.running_on is not None:
            status, on, order = RequestStatus.RUNNING, info.running_on, None
            reason = f"layer {info.layer_index} runs on {info.running_on}; the next waits for it"
        elif started is not None:
            order, start = started
            status, on = RequestStatus.STARTED, start.accelerator_id
            reason = choice.reasons.get(info.id) or (
                f"{policy}: layer {info.layer_index} starts on {on} (start order {order})"
            )
        else:
            status, on, order = RequestStatus.WAITING, None, None
            reason = choice.reasons.get(info.id) or _why_waiting(view, info)
        entries.append(
            DispatchEntry(
                request_id=info.id,
                status=status,
                accelerator_id=on,
                order=order,
                layer=info.layer_index,
                reason=reason,
                deadline_feasible=info.feasible,
                earliest_finish=finish,
            )
        )
    return DispatchResult(
        starts=tuple(
            DispatchStart(
                request_id=s.request_id,
                accelerator_id=s.accelerator_id,
                layer=view.requests_by_id[s.request_id].layer_index,
                order=i,
            )
            for i, s in enumerate(choice.starts)
        ),
        requests=tuple(entries),
        late=tuple(late),
        fallback=fallback,
    )


def _why_waiting(view: DispatchView, info: RequestInfo) -> str:
    styles = {c.style for c in info.layer.costs}
    if not styles & view.styles:
        return (
            f"no online sub-accelerator runs layer {info.layer_index} of {info.model.name!r} "
            f"(styles {', '.join(sorted(styles))})"
        )
    return "waits: no idle sub-accelerator that runs its next layer is left for it this round"


@dataclass(frozen=True)
class DispatchPair:
    """A profile's dispatch policy and the fallback that answers when it fails."""

    policy: DispatchPolicy
    fallback: DispatchPolicy | None


def build_dispatch(
    registry: Registry, profiles: Mapping[str, Profile], models: ModelProvider | None = None
) -> dict[str, DispatchPair]:
    """Every profile's dispatch policy and fallback: what the service and simulator call."""
    out = {}
    for name, profile in profiles.items():
        backup = profile.fallback.get(Stage.DISPATCH)
        out[name] = DispatchPair(
            policy=registry.dispatch(profile.dispatch.name, profile.dispatch.params, models),
            fallback=(
                registry.dispatch(backup.name, backup.params) if backup is not None else None
            ),
        )
    return out
