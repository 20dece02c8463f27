"""DL2's policy network and the wrapper that serves, saves and loads it.

Peng et al., "DL2" (2019), §4.1: a policy network of two fully connected hidden
layers maps the state to a distribution over the 3J + 1 actions. Invalid actions
get probability zero by masking their logits (the paper's code rescales masked
probabilities; masking logits is the same distribution, and numerically safer).

:class:`Dl2Model` is the unit the rest of Arbiter handles: the configuration plus
the network. Following stable-baselines3's shape, one public :meth:`Dl2Model.predict`
owns the input checks and the inference path (NumPy on the module's parameters, see
:meth:`Dl2Model.state_logits`) and calls a small hook to choose; a model
is saved as its constructor parameters plus its `state_dict`, here in one
safetensors file (tensors only, the configuration as JSON in the file's header
metadata), so loading never unpickles anything.
"""

from __future__ import annotations

import numpy as np
import torch
from pydantic import JsonValue
from torch import nn

from policies.learned import weights
from policies.learned.dl2.features import Dl2Config
from policies.learned.models import InvalidActionError

FORMAT = "arbiter-dl2"
FORMAT_VERSION = "1"


class Dl2Network(nn.Module):
    """State → action logits: two ReLU hidden layers, as in the paper."""

    def __init__(self, config: Dl2Config) -> None:
        super().__init__()
        first, second = config.hidden
        self.hidden1 = nn.Linear(config.input_size, first)
        self.hidden2 = nn.Linear(first, second)
        self.output = nn.Linear(second, config.actions)

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        hidden = torch.relu(self.hidden2(torch.relu(self.hidden1(states))))
        out: torch.Tensor = self.output(hidden)
        return out


def masked_logits(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Logits with invalid actions at -inf (a categorical over the valid ones)."""
    return logits.masked_fill(~mask, float("-inf"))


class Dl2Model:
    """A DL2 configuration and network: predict, save and load.

    The network is plain `torch.nn.Module`; trainers update it in place through
    :attr:`network` and call :meth:`logits` with gradients.
    """

    def __init__(self, config: Dl2Config, network: Dl2Network | None = None) -> None:
        self.config = config
        self.network = network if network is not None else Dl2Network(config)
        self._views: tuple[tuple[np.ndarray, np.ndarray], ...] | None = None

    @classmethod
    def initial(cls, config: Dl2Config, seed: int = 0) -> Dl2Model:
        """A freshly initialised model; the same seed gives the same weights."""
        generator = torch.Generator().manual_seed(seed)
        network = Dl2Network(config)
        with torch.no_grad():
            for module in network.modules():
                if isinstance(module, nn.Linear):
                    bound = 1.0 / module.in_features**0.5
                    module.weight.uniform_(-bound, bound, generator=generator)
                    module.bias.uniform_(-bound, bound, generator=generator)
        return cls(config, network)

    # -- inference --------------------------------------------------------------------------
    def logits(self, states: torch.Tensor) -> torch.Tensor:
        """Raw logits for a batch of states (with gradients if enabled); no checks."""
        out: torch.Tensor = self.network(states)
        return out

    def predict(
        self,
        state: np.ndarray,
        mask: np.ndarray,
        *,
        deterministic: bool = True,
        rng: np.random.Generator | None = None,
    ) -> int:
        """The action for one state: the most likely valid one, or one sampled from them.

        `state` has `config.input_size` finite entries, `mask` one bool per action
        with at least one True; sampling (`deterministic=False`) draws from `rng`.
        Raises ValueError on bad inputs and InvalidActionError when the network's
        output is not a distribution (NaN or infinite logits).
        """
        cfg = self.config
        state = np.asarray(state, dtype=np.float32)
        mask = np.asarray(mask)
        if state.shape != (cfg.input_size,):
            raise ValueError(f"state has shape {state.shape}, expected ({cfg.input_size},)")
        if mask.shape != (cfg.actions,) or mask.dtype != np.bool_:
            raise ValueError(f"mask must be {cfg.actions} bools, got {mask.dtype} {mask.shape}")
        if not mask.any():
            raise ValueError("every action is masked")
        if not np.isfinite(state).all():
            raise ValueError("state has non-finite entries")
        if not deterministic and rng is None:
            raise ValueError("sampling needs an rng")
        logits = self.state_logits(state)
        if not np.isfinite(logits).all():
            raise InvalidActionError("the network produced non-finite logits")
        return self._choose(logits, mask, deterministic, rng)

    def state_logits(self, state: np.ndarray) -> np.ndarray:
        """The network on one float32 state, evaluated in NumPy on views of its parameters.

        Serving asks for one state at a time, a hundred times a round. For a network
        this small, torch's per-operation dispatch dominates, and its intra-op thread
        pool stalls whenever another process holds a core: on the 2-core development
        machine, 25 µs here against 0.15–3.5 ms through the module. The views, made on
        first use, share the parameters' memory, so they follow in-place updates (an
        optimizer's step, `load_state_dict`); replacing the parameters themselves
        (`.to()`, new layers) needs a new `Dl2Model`. The module stays the reference,
        and the tests hold the two equal. No dropout or normalisation layers, so there
        is no train/eval distinction to honour.
        """
        if self._views is None:
            net = self.network
            self._views = tuple(
                (weights.numpy_view(layer.weight).T, weights.numpy_view(layer.bias))
                for layer in (net.hidden1, net.hidden2, net.output)
            )
        (w1, b1), (w2, b2), (w3, b3) = self._views
        hidden = state @ w1 + b1
        np.maximum(hidden, 0.0, out=hidden)
        hidden = hidden @ w2 + b2
        np.maximum(hidden, 0.0, out=hidden)
        out: np.ndarray = hidden @ w3 + b3
        return out

    def _choose(
        self,
        logits: np.ndarray,
        mask: np.ndarray,
        deterministic: bool,
        rng: np.random.Generator | None,
    ) -> int:
        """Pick an action from one state's logits (the hook subclasses may change)."""
        valid = np.where(mask, logits, -np.inf)
        if deterministic or rng is None:
            return int(np.argmax(valid))
        odds = np.exp(valid - valid.max())
        return int(rng.choice(len(odds), p=odds / odds.sum()))

    # -- persistence ----------------------------------------------------------------------------
    def meta(self) -> dict[str, JsonValue]:
        """What the weights file says about itself (also stored beside a model version)."""
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "config": self.config.model_dump(mode="json"),
        }

    def to_bytes(self) -> bytes:
        """Safetensors bytes: the state_dict's tensors, the configuration in the header.

        The header carries one metadata key (safetensors orders several arbitrarily),
        so equal weights give equal bytes.
        """
        return weights.dump(self.network.state_dict(), self.meta())

    @classmethod
    def from_bytes(cls, data: bytes) -> Dl2Model:
        """Load what :meth:`to_bytes` wrote; ModelLoadError for anything else."""
        config, tensors = weights.read(
            data,
            what="DL2",
            format_name=FORMAT,
            format_version=FORMAT_VERSION,
            config=Dl2Config,
        )
        network = Dl2Network(config)
        weights.load_into(network, tensors, "DL2")
        network.eval()
        return cls(config, network)
