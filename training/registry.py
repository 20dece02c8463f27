"""One registry of trainers: how every learned policy is retrained, judged and stored.

A learned policy (its model key, `policies.protocols.LearnedPolicy.model_key`)
brings one :class:`Trainer`, and everything that retrains goes through
:func:`trainers`: `POST /admin/retrain`, `arbiter train NAME`, the queue worker,
activation (which checks a version loads before serving it) and shadow mode
(which serves stored versions by model key). Adding a learned policy is one
trainer class and one line in :func:`trainers`; nothing in `app` names a policy.

A trainer owns, in one place:

* its **budget**: one pydantic model, a subclass of :class:`TrainingBudget`
  (whose fields every trainer shares), that validates the API's and the
  command line's `budget` and is what the training code reads: no second copy
  of the fields anywhere;
* its **incumbent**: the version it is judged against when none is active
  (the model shipped with Arbiter), by version name;
* **train**: decision records in, a :class:`Candidate` out (weights as
  safetensors bytes, flat metrics, whether it beats the incumbent on held-out
  episodes, metadata of the model). It stores and activates nothing: the caller
  does, by the request's activation rule;
* **check**: whether bytes are a model of this policy that this code can load.

Trainer modules import torch (and whatever else training needs) inside their
methods, so listing the trainers or validating a budget stays cheap.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

Progress = Callable[[str, float], None]
"""`(stage, fraction of that stage done)`; each trainer names its stages in order."""

Start = Literal["incumbent", "scratch"]

Record = tuple[Mapping[str, Any], Mapping[str, Any]]
"""One logged decision: (snapshot, decision), as the decision log stores them."""

LoggedSource = Literal["decisions", "decisions-with-finishes", "dispatches"]

_LOGGED_SOURCES: tuple[LoggedSource, ...] = ("decisions-with-finishes", "dispatches")


def logged_source(trainer: object) -> LoggedSource:
    """Which logged records a trainer's `records` are, as the trainer's class attribute
    `logged` says: `decisions` (the scheduling decisions, the default);
    `decisions-with-finishes` (the same, each decision with the `job_finished` feedback of
    the jobs its snapshot is the first to name, under `finished`:
    `storage.repositories.DecisionRepository.snapshots_and_decisions(finishes=True)`); or
    `dispatches` (the dispatch answers, each decision with the `outcomes` of its requests:
    `storage.repositories.DecisionRepository.dispatches_with_outcomes`)."""
    logged = getattr(trainer, "logged", None)
    for source in _LOGGED_SOURCES:
        if logged == source:
            return source
    return "decisions"


class TrainingError(ValueError):
    """The inputs cannot give a candidate (nothing to learn from, no episode to judge on).

    The retrain job fails with this message; anything else a trainer raises is a fault.
    """


class TrainingBudget(BaseModel):
    """The fields every trainer's budget has; a trainer's budget subclasses this one.

    Defaults are each trainer's shipped run. `updates` is what `steps` (the admin
    API's short form) sets: a small number is a smoke run for every trainer.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    updates: int = Field(default=80, ge=0, le=10_000, description="RL updates (0: none).")
    held_out_episodes: int = Field(
        default=5, ge=1, le=5, description="Episodes of the verdict against the active version."
    )
    max_records: int = Field(
        default=20_000, ge=1, le=1_000_000, description="Most logged decisions read."
    )


@dataclass(frozen=True)
class Incumbent:
    """The version a candidate is judged against: the active one, else the shipped model."""

    version: str
    weights: bytes | None
    """The active version's weights; None: no version is active, the shipped model."""


@dataclass(frozen=True)
class Candidate:
    """What a training run produced; the caller stores it and decides on activation."""

    weights: bytes
    """Safetensors bytes: tensors only, loaded without unpickling code."""
    metrics: dict[str, Any]
    """Flat JSON values: the held-out comparison, data counts, timings."""
    wins: bool
    """Whether it beat the incumbent on the held-out episodes (`activate: if_better`)."""
    model_meta: dict[str, Any] = field(default_factory=dict)


class Trainer(Protocol):
    """How one learned policy is retrained. Implementations are stateless."""

    name: ClassVar[str]
    """The model key its versions are stored under (`LearnedPolicy.model_key`)."""
    summary: ClassVar[str]
    stages: ClassVar[tuple[str, ...]]
    """Progress stages in the order :meth:`train` reports them."""
    Budget: ClassVar[type[TrainingBudget]]
    needs_logged_decisions: ClassVar[bool]
    """Whether a window with no logged decision is refused (nothing to imitate)."""

    def shipped_version(self) -> str:
        """The version name of the model shipped with Arbiter (the incumbent when none is
        active); raises `policies.learned.models.ModelLoadError` when it cannot be read."""
        ...

    def check(self, weights: bytes) -> None:
        """Raise `ModelLoadError` unless `weights` are a model of this policy that loads."""
        ...

    def train(
        self,
        records: Iterable[Record],
        incumbent: Incumbent,
        budget: TrainingBudget,
        *,
        seed: int,
        start: Start,
        on_progress: Progress,
    ) -> Candidate:
        """A candidate from `records` (logged decisions of the window) within `budget`
        (an instance of :attr:`Budget`), judged against `incumbent`.

        Raises :class:`TrainingError` when the inputs teach nothing.
        """
        ...


class UnknownTrainerError(KeyError):
    def __init__(self, name: str, known: Iterable[str]) -> None:
        super().__init__(name)
        self.name = name
        self.known = tuple(known)

    def __str__(self) -> str:
        return f"{self.name!r} is not a learned policy that can be retrained; known: " + (
            ", ".join(self.known)
        )


class Trainers:
    """The registered trainers by name, in registration order."""

    def __init__(self, trainers: Iterable[Trainer]) -> None:
        self._by_name: dict[str, Trainer] = {}
        for trainer in trainers:
            if trainer.name in self._by_name:
                raise ValueError(f"two trainers for {trainer.name!r}")
            self._by_name[trainer.name] = trainer

    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def get(self, name: str) -> Trainer:
        found = self._by_name.get(name)
        if found is None:
            raise UnknownTrainerError(name, self._by_name)
        return found

    def __contains__(self, name: object) -> bool:
        return name in self._by_name

    def __iter__(self) -> Iterator[Trainer]:
        return iter(self._by_name.values())


def trainers() -> Trainers:
    """Every trainer Arbiter has. The one place a learned policy's trainer is registered."""
    from training.dl2.trainer import (  # noqa: PLC0415 - light; torch loads on train
        Dl2SrtfTrainer,
        Dl2Trainer,
    )
    from training.dual_agent.trainer import DualAgentTrainer  # noqa: PLC0415
    from training.relmas.trainer import RelmasTrainer  # noqa: PLC0415

    return Trainers([Dl2Trainer(), Dl2SrtfTrainer(), DualAgentTrainer(), RelmasTrainer()])
