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

import json
import struct

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, JsonValue, ValidationError
from safetensors import SafetensorError
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors
from torch import nn

from policies.learned.models import InvalidActionError, ModelLoadError
from policies.learned.relmas.features import feature_count

FORMAT = "arbiter-relmas"
FORMAT_VERSION = "1"
_HEADER_KEY = "arbiter"


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
                for view in (_array(layer.weight).T, _array(layer.bias))
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
        tensors = {k: v.detach().contiguous() for k, v in self.network.state_dict().items()}
        header = json.dumps(self.meta(), sort_keys=True, separators=(",", ":"))
        return save_tensors(tensors, metadata={_HEADER_KEY: header})

    @classmethod
    def from_bytes(cls, data: bytes) -> RelmasModel:
        """Load what :meth:`to_bytes` wrote; ModelLoadError for anything else."""
        header = _header_metadata(data)
        if header.get("format") != FORMAT:
            raise ModelLoadError(f"not a RELMAS model (format {header.get('format')!r})")
        if header.get("format_version") != FORMAT_VERSION:
            raise ModelLoadError(
                f"RELMAS model format version {header.get('format_version')!r}; "
                f"this code reads {FORMAT_VERSION!r}"
            )
        try:
            config = RelmasConfig.model_validate(header.get("config"))
        except ValidationError as error:
            raise ModelLoadError(f"RELMAS model configuration: {error}") from error
        try:
            tensors = load_tensors(data)
        except (SafetensorError, ValueError, RuntimeError) as error:
            raise ModelLoadError(f"RELMAS weights: {error}") from error
        network = RelmasNetwork(config)
        try:
            network.load_state_dict(tensors, strict=True)
        except RuntimeError as error:
            raise ModelLoadError(f"RELMAS weights do not fit the configuration: {error}") from error
        for name, tensor in network.state_dict().items():
            if not bool(torch.isfinite(tensor).all()):
                raise ModelLoadError(f"RELMAS weights: {name} has non-finite values")
        network.eval()
        return cls(config, network)


def _array(parameter: torch.Tensor) -> np.ndarray:
    view: np.ndarray = parameter.detach().numpy()
    return view


def _header_metadata(data: bytes) -> dict[str, JsonValue]:
    """Arbiter's metadata in a safetensors header, read without touching the tensors."""
    if len(data) < 8:
        raise ModelLoadError("RELMAS model: too short to be a safetensors file")
    (length,) = struct.unpack("<Q", data[:8])
    if length > len(data) - 8 or length > 10_000_000:
        raise ModelLoadError("RELMAS model: safetensors header length is out of range")
    try:
        header = json.loads(data[8 : 8 + length])
        ours = json.loads(header["__metadata__"][_HEADER_KEY])
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ModelLoadError(
            f"RELMAS model: no readable metadata in the header: {error}"
        ) from error
    if not isinstance(ours, dict):
        raise ModelLoadError("RELMAS model: the header's metadata is not an object")
    return ours
