"""How a learned policy receives its model: stored versions, and who hands them out.

The registry builds policies from their `Params` alone; a learned policy also needs
weights. The service (or a test, or a trainer) owns the versions and passes a
:class:`ModelProvider` to :meth:`policies.registry.Registry.create`, which gives each
learned policy the blob stored under its `model_key` (see
:class:`policies.protocols.LearnedPolicy`). Weights travel as bytes of tensors only
(safetensors): nothing stored is ever unpickled.

Failures are data for the engine, not crashes at start-up: a policy whose model
is missing or does not load is still built, and raises when asked to decide, so the
profile's fallback answers and the decision says why (DESIGN §2).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from pydantic import JsonValue


class ModelLoadError(ValueError):
    """Bytes that are not a model this code can load (corrupt, wrong format or shape)."""


class ModelUnavailableError(RuntimeError):
    """A learned policy asked to decide without a usable model."""


class InvalidActionError(RuntimeError):
    """A model answered with an action that is not valid in the state it was shown."""


class LatencyBudgetExceededError(RuntimeError):
    """A learned policy took longer than its latency budget for one decision."""


@dataclass(frozen=True)
class ModelBlob:
    """One stored version of a policy's model, as the service keeps it.

    `weights` are safetensors bytes (tensors only); `meta` is the version's JSON
    metadata (training window, metrics, parent version), informational here: a
    model's shape travels inside its weights file, so the two cannot disagree.
    """

    policy: str
    version: str
    weights: bytes
    meta: Mapping[str, JsonValue] = field(default_factory=dict)


class ModelProvider(Protocol):
    """Hands out the model version a learned policy should use."""

    def model_for(self, policy: str) -> ModelBlob | None:
        """The active version stored under `policy`, or None when there is none.

        None lets the policy use the model shipped with Arbiter (if its parameters
        allow); it is not an error.
        """
        ...


class StaticModels:
    """A fixed mapping of policy → model version; for tests, scripts and simulations."""

    def __init__(self, models: Mapping[str, ModelBlob] | None = None) -> None:
        self._models = dict(models or {})

    def model_for(self, policy: str) -> ModelBlob | None:
        return self._models.get(policy)
