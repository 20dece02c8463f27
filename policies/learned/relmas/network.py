"""RELMAS's policy network and the wrapper that serves, saves and loads it.

The paper describes an LSTM actor over the pending requests, trained with DDPG. Ours
(docs/relmas.md) is a permutation-invariant set encoder (Zaheer et al., "Deep Sets",
NeurIPS 2017) over candidate (request, sub-accelerator) pairs: each pair is embedded,
the mean embedding is the round's context, and a second layer scores each pair from
its embedding and the context. A set has no order to learn, where an LSTM would be fed
the requests in some arbitrary order; and the scores decode into a discrete choice,
trained by policy gradient instead of DDPG's continuous action.

Persistence follows the DL2 model's conventions (:mod:`policies.learned.dl2.network`):
one safetensors file, the state_dict's tensors plus the configuration as JSON under one
header key, loaded without unpickling anything; serving evaluates the network in NumPy
on views of its parameters.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from torch import nn

from policies.learned import weights
from policies.learned.models import InvalidActionError
from policies.learned.relmas.features import feature_count

FORMAT = "arbiter-relmas"
FORMAT_VERSION = "1"


class RelmasConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    styles: tuple[str, ...] = Field(
        default=("os", "rs", "ws"), description="Style vocabulary of the one-hot feature."
    )
    hidden: int = Field(default=32, ge=4, le=512)

    @property
    def input_size(self) -> int:
        return feature_count(self.styles)


class RelmasNetwork(nn.Module):
    """Pairs [N, F] → scores [N]: embed, mean-pool a context, score each pair with it."""

    def __init__(self, config: RelmasConfig) -> None:
        super().__init__()
        self.embed = nn.Linear(config.input_size, config.hidden)
        self.mix = nn.Linear(2 * config.hidden, config.hidden)
        self.score = nn.Linear(config.hidden, 1)

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.embed(pairs))
        context = hidden.mean(dim=0, keepdim=True).expand_as(hidden)
        mixed = torch.relu(self.mix(torch.cat((hidden, context), dim=1)))
        out: torch.Tensor = self.score(mixed).squeeze(1)
        return out


class RelmasModel:
    """A RELMAS configuration and network: score, save and load."""

    def __init__(self, config: RelmasConfig, network: RelmasNetwork | None = None) -> None:
        self.config = config
        self.network = network if network is not None else RelmasNetwork(config)
        self._views: tuple[np.ndarray, ...] | None = None

    @classmethod
    def initial(cls, config: RelmasConfig, seed: int = 0) -> RelmasModel:
        """A freshly initialised model; the same seed gives the same weights."""
        torch.manual_seed(seed)
        return cls(config, RelmasNetwork(config))

    def scores(self, pairs: np.ndarray) -> np.ndarray:
        """Scores of one round's pairs, in NumPy on views of the parameters.

        As for DL2, torch's per-operation dispatch costs more than this small network
        itself; the views share the parameters' memory, so they follow in-place updates.
        Raises ValueError on a bad shape and InvalidActionError on non-finite scores.
        """
        if pairs.ndim != 2 or pairs.shape[1] != self.config.input_size:
            raise ValueError(
                f"pairs have shape {pairs.shape}, expected (N, {self.config.input_size})"
            )
        if len(pairs) == 0:
            return np.zeros(0, dtype=np.float32)
        if self._views is None:
            net = self.network
            self._views = tuple(
                view
                for layer in (net.embed, net.mix, net.score)
                for view in (weights.numpy_view(layer.weight).T, weights.numpy_view(layer.bias))
            )
        w1, b1, w2, b2, w3, b3 = self._views
        hidden = pairs @ w1 + b1
        np.maximum(hidden, 0.0, out=hidden)
        context = np.broadcast_to(hidden.mean(axis=0, keepdims=True), hidden.shape)
        mixed = np.concatenate((hidden, context), axis=1) @ w2 + b2
        np.maximum(mixed, 0.0, out=mixed)
        out: np.ndarray = (mixed @ w3 + b3)[:, 0]
        if not np.isfinite(out).all():
            raise InvalidActionError("the network produced non-finite scores")
        return out

    # -- persistence ----------------------------------------------------------------------
    def meta(self) -> dict[str, JsonValue]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "config": self.config.model_dump(mode="json"),
        }

    def to_bytes(self) -> bytes:
        return weights.dump(self.network.state_dict(), self.meta())

    @classmethod
    def from_bytes(cls, data: bytes) -> RelmasModel:
        """Load what :meth:`to_bytes` wrote; ModelLoadError for anything else."""
        config, tensors = weights.read(
            data,
            what="RELMAS",
            format_name=FORMAT,
            format_version=FORMAT_VERSION,
            config=RelmasConfig,
        )
        network = RelmasNetwork(config)
        weights.load_into(network, tensors, "RELMAS")
        network.eval()
        return cls(config, network)
