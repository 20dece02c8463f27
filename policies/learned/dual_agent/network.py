"""The dual agent's model: the ordering network, the placement agent's ranking, the GP's
hyperparameters, saved together as one safetensors file.

Xing et al., KDD 2023. The ordering agent is permutation-equivariant and scales to
any number of jobs through **squeeze and communicate** (the abstract's words): each
job is embedded alone, the embeddings are squeezed (mean- and max-pooled) into one
cluster summary, the summary is communicated back to every job, and each job is
scored from its own embedding and the summary. Permuting the jobs permutes the
scores, whatever the number of jobs (a Deep Sets / PointNet shape; Zaheer et al.,
NeurIPS 2017). The layer sizes are ours.

The placement agent's learned parameters are few and interpretable (ours): a
risk attitude `κ` (a machine's speed is judged at `μ + κσ` of its posterior: `κ < 0`
is risk-averse, `κ > 0` optimistic) and a value of time `λ` in dollars per GPU-hour
(a machine is ranked by predicted speed per `price + λ`, so `λ` trades fee against
completion time) and a patience `θ` (a job waits rather than start on machines that
would run it at under `θ` of the speed of the best GPU type the cluster has for it).
All three are trained jointly with the ordering network
(:mod:`training.dual_agent`).

Saved as constructor parameters plus tensors (safetensors, the configuration in
the header), loaded without unpickling, as DL2's model is.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from pydantic import BaseModel, ConfigDict, Field, JsonValue
from torch import nn

from policies.learned import weights
from policies.learned.dual_agent.features import CLUSTER_FEATURES, JOB_FEATURES
from policies.learned.dual_agent.gp import GpHyper

SCORE_DECIMALS = 10
"""Decimals the served ordering scores are rounded to (ours): far above float64's noise
(about 1e-15 here), far below any difference the network means."""
FORMAT = "arbiter-dual-agent"
FORMAT_VERSION = "1"


class DualAgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    job_features: int = Field(default=JOB_FEATURES, ge=1)
    cluster_features: int = Field(default=CLUSTER_FEATURES, ge=0)
    hidden: int = Field(default=32, ge=1, le=1024)


class OrderingNetwork(nn.Module):
    """Jobs [J, F] and cluster features [C] → one score per job [J] (higher: served earlier)."""

    def __init__(self, config: DualAgentConfig) -> None:
        super().__init__()
        h = config.hidden
        self.embed1 = nn.Linear(config.job_features, h)
        self.embed2 = nn.Linear(h, h)
        self.squeeze = nn.Linear(2 * h + config.cluster_features, h)
        self.score1 = nn.Linear(2 * h, h)
        self.score2 = nn.Linear(h, 1)

    def summary(
        self, jobs: torch.Tensor, cluster: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-job embeddings [J, H] and the squeezed cluster summary [H]."""
        embedded = torch.relu(self.embed2(torch.relu(self.embed1(jobs))))
        if embedded.shape[0] == 0:
            pooled = torch.zeros(2 * embedded.shape[1], dtype=embedded.dtype)
        else:
            pooled = torch.cat([embedded.mean(0), embedded.max(0).values])
        summary = torch.relu(self.squeeze(torch.cat([pooled, cluster])))
        return embedded, summary

    def forward(self, jobs: torch.Tensor, cluster: torch.Tensor) -> torch.Tensor:
        embedded, summary = self.summary(jobs, cluster)
        # Communicate: every job sees the same summary beside its own embedding.
        shared = summary.expand(embedded.shape[0], -1)
        hidden = torch.relu(self.score1(torch.cat([embedded, shared], dim=1)))
        out: torch.Tensor = self.score2(hidden).squeeze(-1)
        return out


class PlacementHead(nn.Module):
    """The placement agent's learned attitude: risk `κ`, value of time `λ`, patience `θ`,
    and the widths of the training distributions."""

    INITIAL_PATIENCE = 0.2
    """θ at the start of training (ours; docs/dual-agent.md, *patience*): a job waits rather
    than run at under a fifth of the speed its best GPU type would give it."""
    INITIAL_TIME_VALUE = 0.3
    """λ at the start of training, $ per GPU-hour (ours; docs/dual-agent.md): near speed per
    dollar, since the patience, not λ, keeps jobs off machines far too slow for them."""
    NO_PATIENCE_LOGIT = -30.0
    """θ ≈ 1e-13, i.e. never wait: what a model saved before `θ` existed decides with."""

    def __init__(self) -> None:
        super().__init__()
        self.risk = nn.Parameter(torch.tensor([-1.0]))
        self.raw_time_value = nn.Parameter(
            torch.tensor([math.log(math.expm1(self.INITIAL_TIME_VALUE))])
        )
        self.log_temperature = nn.Parameter(torch.tensor([-2.0]))
        """Softness of the sampled ranking in training; serving takes the best machine."""
        theta = self.INITIAL_PATIENCE
        self.raw_patience = nn.Parameter(torch.tensor([math.log(theta / (1.0 - theta))]))
        self.log_patience_width = nn.Parameter(torch.tensor([math.log(0.5)]))
        """Spread of the sampled patience (in log-odds) in training; serving takes its centre."""

    @property
    def time_value(self) -> torch.Tensor:
        """λ ≥ 0, dollars per GPU-hour that one GPU-hour of a job's time is worth."""
        return nn.functional.softplus(self.raw_time_value)

    @property
    def patience(self) -> torch.Tensor:
        """θ in (0, 1): the least share of its best GPU type's speed a job starts at."""
        return torch.sigmoid(self.raw_patience)

    def scores(
        self, log_speed: torch.Tensor, std: torch.Tensor, price: torch.Tensor
    ) -> torch.Tensor:
        """log(speed at μ + κσ) − log(price + λ), per machine: work per dollar-and-time."""
        return log_speed + self.risk * std - torch.log(price + self.time_value + 1e-3)


class DualAgentModel:
    """Configuration, ordering network, placement head and GP hyperparameters."""

    def __init__(
        self,
        config: DualAgentConfig,
        ordering: OrderingNetwork | None = None,
        placement: PlacementHead | None = None,
        gp: GpHyper | None = None,
    ) -> None:
        self.config = config
        self.ordering = ordering if ordering is not None else OrderingNetwork(config)
        self.placement = placement if placement is not None else PlacementHead()
        self.gp = gp if gp is not None else GpHyper()
        self._views: tuple[tuple[np.ndarray, np.ndarray], ...] | None = None

    @classmethod
    def initial(cls, config: DualAgentConfig | None = None, seed: int = 0) -> DualAgentModel:
        """Fresh weights; the same seed gives the same model."""
        cfg = config or DualAgentConfig()
        generator = torch.Generator().manual_seed(seed)
        ordering = OrderingNetwork(cfg)
        with torch.no_grad():
            for module in ordering.modules():
                if isinstance(module, nn.Linear):
                    bound = 1.0 / module.in_features**0.5
                    module.weight.uniform_(-bound, bound, generator=generator)
                    module.bias.uniform_(-bound, bound, generator=generator)
        return cls(cfg, ordering)

    def parameters(self) -> list[nn.Parameter]:
        return [
            *self.ordering.parameters(),
            *self.placement.parameters(),
            *self.gp.parameters(),
        ]

    def scores(self, jobs: torch.Tensor, cluster: torch.Tensor) -> torch.Tensor:
        """Scores through the torch module (with gradients if enabled): training's path."""
        out: torch.Tensor = self.ordering(jobs, cluster)
        return out

    def scores_numpy(self, jobs: np.ndarray, cluster: np.ndarray) -> np.ndarray:
        """The same scores in NumPy on views of the module's parameters: serving's path.

        As DL2's `state_logits`: for a network this small, torch's per-operation
        dispatch and its intra-op thread pool (which stalls whenever another process
        holds a core) cost more than the arithmetic. The views share the parameters'
        memory; the tests hold the two paths equal.

        Computed in float64 and rounded to SCORE_DECIMALS, so the order is the same
        on every processor: in float32, BLAS kernels chosen by the CPU (their blocking,
        their fused multiply-adds) left two jobs of nearly equal score a few ulps apart
        in an order that depended on the machine, and the served order with them.
        Rounded, such jobs tie exactly and the order's own tie-break (submission,
        then snapshot position) decides. The weights are cast per call (a few
        thousand numbers), so training's in-place updates are always seen.
        """
        if self._views is None:
            net = self.ordering
            self._views = tuple(
                (weights.numpy_view(layer.weight).T, weights.numpy_view(layer.bias))
                for layer in (net.embed1, net.embed2, net.squeeze, net.score1, net.score2)
            )
        (w1, b1), (w2, b2), (ws, bs), (w3, b3), (w4, b4) = (
            (w.astype(np.float64), b.astype(np.float64)) for w, b in self._views
        )
        jobs = jobs.astype(np.float64)
        embedded = np.maximum(np.maximum(jobs @ w1 + b1, 0.0) @ w2 + b2, 0.0)
        if len(jobs) == 0:
            pooled = np.zeros(2 * embedded.shape[1], dtype=np.float64)
        else:
            pooled = np.concatenate([embedded.mean(0), embedded.max(0)])
        summary = np.maximum(np.concatenate([pooled, cluster.astype(np.float64)]) @ ws + bs, 0.0)
        shared = np.broadcast_to(summary, (len(jobs), summary.shape[0]))
        hidden = np.maximum(np.concatenate([embedded, shared], axis=1) @ w3 + b3, 0.0)
        out: np.ndarray = np.round((hidden @ w4 + b4)[:, 0], SCORE_DECIMALS)
        return out

    def gp_hyper(self) -> dict[str, torch.Tensor]:
        return self.gp.positive()

    # -- persistence ----------------------------------------------------------------------------
    def meta(self) -> dict[str, JsonValue]:
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "config": self.config.model_dump(mode="json"),
        }

    def _tensors(self) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        for prefix, module in (
            ("ordering", self.ordering),
            ("placement", self.placement),
            ("gp", self.gp),
        ):
            for name, tensor in module.state_dict().items():
                out[f"{prefix}.{name}"] = tensor.detach().contiguous()
        return out

    def to_bytes(self) -> bytes:
        """Safetensors bytes; equal weights give equal bytes (one metadata key)."""
        return weights.dump(self._tensors(), self.meta())

    @classmethod
    def from_bytes(cls, data: bytes) -> DualAgentModel:
        """Load what :meth:`to_bytes` wrote; ModelLoadError for anything else."""
        config, tensors = weights.read(
            data,
            what="dual-agent",
            format_name=FORMAT,
            format_version=FORMAT_VERSION,
            config=DualAgentConfig,
        )
        model = cls(config)
        for prefix, module in (
            ("ordering", model.ordering),
            ("placement", model.placement),
            ("gp", model.gp),
        ):
            part = {
                k.removeprefix(prefix + "."): v
                for k, v in tensors.items()
                if k.startswith(prefix + ".")
            }
            if prefix == "placement" and part and "raw_patience" not in part:
                # Saved before the patience existed: it never waited, and still does not.
                part["raw_patience"] = torch.tensor([PlacementHead.NO_PATIENCE_LOGIT])
                part["log_patience_width"] = torch.tensor([math.log(0.5)])
            weights.load_into(module, part, f"dual-agent ({prefix})")
        model.ordering.eval()
        return model
