"""RWGP: a Gaussian process over GPU machines with a random-walk (graph diffusion) kernel.

Xing et al., KDD 2023, name the placement agent's model a Random-Walk Gaussian
Process that learns the performance similarity of GPU machines. Its exact form
is not available here; this one is ours (docs/dual-agent.md):

* **What is modelled.** A machine's own speed factor: the log of the speed a
  job gets on it over the speed the job's table says for that GPU type
  (`Job.gpu_type_speed`). Table × factor is the predicted speed; the factor is
  the unbalanced performance the abstract speaks of (stragglers, thermal or
  firmware differences, contention).
* **Kernel.** `k = s_g · k_graph + s_f · k_feat`. `k_graph` is the diffusion
  kernel `exp(−β L̃)` of a weighted machine graph (Kondor & Lafferty, ICML 2002;
  the heat kernel of a continuous-time random walk, the limit of Smola & Kondor's
  p-step random-walk kernel, COLT 2003), `L̃` the symmetric normalised
  Laplacian, rescaled to a unit diagonal (a congruence, so PSD is kept). Edges:
  same GPU type, same rack or switch, and similar observed factors, each with a
  learned positive weight. `k_feat` is an ARD RBF over static machine features
  (price, GPU memory, CPUs per GPU, GPUs).
* **Data.** Per machine, the mean of its observed log factors and their count
  (kept by :mod:`policies.placement.rwgp` as policy state); a machine with `n`
  observations is one training point with noise variance `σ²/n`.

Built on gpytorch's exact GP (`ExactGP`, `FixedNoiseGaussianLikelihood`); the
hyperparameters are tensors of the dual agent's model file.
"""

from __future__ import annotations

import math
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import gpytorch
import numpy as np
import torch
from gpytorch.constraints import Positive
from torch import nn

from policies.learned.dual_agent.features import MACHINE_FEATURES, machine_features
from policies.model import Node

EDGE_KINDS = ("gpu_type", "rack", "observed_speed")
SPEED_SIMILARITY = 0.05
"""Width of the observed-speed edge: machines whose mean log factors differ by this much
are joined with weight e^(−1/2) (ours: about the PAI per-machine spread, 5-10 %)."""


class GraphDiffusionKernel(gpytorch.kernels.Kernel):  # type: ignore[misc]
    r"""Diffusion kernel on a weighted graph of machines, inputs being machine indices.

    .. math::
        A = \sum_p w_p A_p,\quad \tilde L = I - D^{-1/2} A D^{-1/2},\quad
        K = \exp(-\beta \tilde L),\quad k(i, j) = K_{ij} / \sqrt{K_{ii} K_{jj}}

    `parts` ([P, n, n], symmetric, non-negative, zero diagonal) are the edge kinds;
    `β > 0` and the weights `w_p > 0` are constrained hyperparameters. An isolated
    machine has `K_ii = e^{-β}`, hence the rescaling to a unit diagonal: every
    machine has the same prior variance, and edges only add correlation.
    """

    has_lengthscale = False

    def __init__(self, parts: torch.Tensor, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.register_buffer("parts", parts)
        self.register_parameter("raw_beta", nn.Parameter(torch.zeros(1, dtype=parts.dtype)))
        self.register_constraint("raw_beta", Positive())
        self.register_parameter(
            "raw_edge_weights", nn.Parameter(torch.zeros(parts.shape[0], dtype=parts.dtype))
        )
        self.register_constraint("raw_edge_weights", Positive())

    @property
    def beta(self) -> torch.Tensor:
        value: torch.Tensor = self.raw_beta_constraint.transform(self.raw_beta)
        return value

    @property
    def edge_weights(self) -> torch.Tensor:
        value: torch.Tensor = self.raw_edge_weights_constraint.transform(self.raw_edge_weights)
        return value

    def matrix(self) -> torch.Tensor:
        """The full n × n kernel matrix over machines."""
        parts: torch.Tensor = self.parts
        adjacency = (self.edge_weights[:, None, None] * parts).sum(0)
        degree = adjacency.sum(-1)
        scale = torch.where(degree > 0, degree.clamp_min(1e-12).rsqrt(), torch.zeros_like(degree))
        n = adjacency.shape[-1]
        laplacian = torch.eye(n, dtype=adjacency.dtype) - scale[:, None] * adjacency * scale[None]
        heat = torch.linalg.matrix_exp(-self.beta * laplacian)
        heat = 0.5 * (heat + heat.transpose(-1, -2))
        norm = heat.diagonal().clamp_min(1e-12).rsqrt()
        out: torch.Tensor = norm[:, None] * heat * norm[None, :]
        return out

    def forward(
        self, x1: torch.Tensor, x2: torch.Tensor, diag: bool = False, **params: Any
    ) -> torch.Tensor:
        full = self.matrix()
        i1 = x1[..., 0].round().long()
        i2 = x2[..., 0].round().long()
        out: torch.Tensor = full[i1, i2] if diag else full[i1][..., i2]
        return out


class GpHyper(nn.Module):
    """The GP's hyperparameters as raw (unconstrained) tensors, saved with the model.

    Softplus maps each raw value to its positive value, as gpytorch's `Positive`
    constraint does, so the same numbers initialise the gpytorch modules.
    """

    def __init__(self) -> None:
        super().__init__()
        self.raw_beta = nn.Parameter(torch.tensor([_inv_softplus(1.0)]))
        self.raw_edge_weights = nn.Parameter(torch.full((len(EDGE_KINDS),), _inv_softplus(1.0)))
        self.raw_graph_scale = nn.Parameter(torch.tensor([_inv_softplus(0.008)]))
        self.raw_feature_scale = nn.Parameter(torch.tensor([_inv_softplus(0.002)]))
        self.raw_lengthscale = nn.Parameter(torch.full((MACHINE_FEATURES,), _inv_softplus(1.0)))
        self.raw_noise = nn.Parameter(torch.tensor([_inv_softplus(0.01)]))
        """Variance of one observation's log factor around its machine's."""

    def positive(self) -> dict[str, torch.Tensor]:
        return {
            name.removeprefix("raw_"): nn.functional.softplus(value)
            for name, value in self.named_parameters()
        }


def _inv_softplus(value: float) -> float:
    return value + math.log(-math.expm1(-value))


@dataclass(frozen=True)
class MachineObservations:
    """Per machine (by id): mean observed log factor and how many observations it summarises."""

    mean: Mapping[str, float]
    count: Mapping[str, float]


def graph_parts(nodes: Sequence[Node], observed: MachineObservations) -> torch.Tensor:
    """The [3, n, n] edge kinds of :data:`EDGE_KINDS` (float64, zero diagonal)."""
    n = len(nodes)
    types = np.array([node.gpu_type for node in nodes])
    racks = np.array([node.topology.rack for node in nodes])
    same_type = (types[:, None] == types[None, :]).astype(np.float64)
    same_rack = ((racks[:, None] == racks[None, :]) & (racks[:, None] != "")).astype(np.float64)
    has = np.array([node.id in observed.mean for node in nodes])
    means = np.array([observed.mean.get(node.id, 0.0) for node in nodes])
    similar = np.exp(-0.5 * ((means[:, None] - means[None, :]) / SPEED_SIMILARITY) ** 2)
    similar *= has[:, None] & has[None, :]
    parts = np.stack([same_type, same_rack, similar])
    parts[:, np.arange(n), np.arange(n)] = 0.0
    return torch.from_numpy(parts)


class MachineGp(gpytorch.models.ExactGP):  # type: ignore[misc]
    """Exact GP over machines: the graph kernel plus the static-feature kernel."""

    def __init__(
        self,
        train_x: torch.Tensor | None,
        train_y: torch.Tensor | None,
        likelihood: gpytorch.likelihoods.Likelihood,
        parts: torch.Tensor,
    ) -> None:
        super().__init__(train_x, train_y, likelihood)
        self.mean_module = gpytorch.means.ZeroMean()
        self.graph = gpytorch.kernels.ScaleKernel(GraphDiffusionKernel(parts, active_dims=(0,)))
        self.features = gpytorch.kernels.ScaleKernel(
            gpytorch.kernels.RBFKernel(
                ard_num_dims=MACHINE_FEATURES, active_dims=tuple(range(1, 1 + MACHINE_FEATURES))
            )
        )
        self.covar_module = self.graph + self.features

    def forward(self, x: torch.Tensor) -> gpytorch.distributions.MultivariateNormal:
        return gpytorch.distributions.MultivariateNormal(self.mean_module(x), self.covar_module(x))

    def set_hyper(self, hyper: Mapping[str, torch.Tensor]) -> None:
        """Load the positive values of :class:`GpHyper` (gpytorch stores them raw)."""
        graph = self.graph.base_kernel
        graph.initialize(
            raw_beta=graph.raw_beta_constraint.inverse_transform(hyper["beta"].detach()),
            raw_edge_weights=graph.raw_edge_weights_constraint.inverse_transform(
                hyper["edge_weights"].detach()
            ),
        )
        self.graph.initialize(outputscale=hyper["graph_scale"].detach().clone().squeeze())
        self.features.initialize(outputscale=hyper["feature_scale"].detach().clone().squeeze())
        self.features.base_kernel.initialize(
            lengthscale=hyper["lengthscale"].detach().clone().reshape(1, -1)
        )


POSTERIOR_DECIMALS = 9
"""Decimals the posterior's mean and standard deviation are rounded to (see `posterior`)."""


@dataclass(frozen=True)
class Posterior:
    """Posterior mean and standard deviation of each machine's log speed factor."""

    node_ids: tuple[str, ...]
    mean: np.ndarray
    std: np.ndarray

    def of(self, node_id: str) -> tuple[float, float]:
        i = self.node_ids.index(node_id)
        return float(self.mean[i]), float(self.std[i])


@cache
def warm_up() -> None:
    """One tiny posterior, so that gpytorch's first-call set-up is not paid by a decision."""
    from policies.model import Topology  # noqa: PLC0415

    nodes = [Node(id=f"w{i}", gpu_type="A", gpus=1, topology=Topology(rack="r")) for i in range(3)]
    posterior(nodes, MachineObservations({"w0": 0.0}, {"w0": 1.0}), GpHyper().positive())


def inputs(nodes: Sequence[Node]) -> torch.Tensor:
    """GP inputs: the machine's index, then its static features."""
    index = np.arange(len(nodes), dtype=np.float64)[:, None]
    return torch.from_numpy(np.hstack([index, machine_features(nodes)]))


class GpSession:
    """A GP built once for one set of machines and reused for every posterior over them.

    Building gpytorch's modules costs far more than a posterior over a few hundred
    machines; the data, the noise, the graph's observed-speed edges and the
    hyperparameters are swapped in place instead. One posterior at a time (a lock).
    """

    def __init__(self, nodes: Sequence[Node]) -> None:
        self.nodes = tuple(nodes)
        self.ids = tuple(node.id for node in nodes)
        self.x = inputs(nodes)
        self.lock = threading.Lock()
        self.likelihood = gpytorch.likelihoods.FixedNoiseGaussianLikelihood(
            noise=torch.ones(1, dtype=torch.float64)
        )
        empty = MachineObservations({}, {})
        self.model = MachineGp(
            self.x[:1],
            torch.zeros(1, dtype=torch.float64),
            self.likelihood,
            graph_parts(nodes, empty),
        ).double()
        self.model.eval()
        self.likelihood.eval()

    def matches(self, nodes: Sequence[Node]) -> bool:
        return len(nodes) == len(self.nodes) and all(
            a == b for a, b in zip(nodes, self.nodes, strict=True)
        )


def posterior(
    nodes: Sequence[Node],
    observed: MachineObservations,
    hyper: Mapping[str, torch.Tensor],
    session: GpSession | None = None,
) -> Posterior:
    """The GP posterior of every machine's log factor given the observations.

    `session` (built for exactly these `nodes`) saves building the GP anew.
    """
    hyper64 = {k: v.detach().to(torch.float64) for k, v in hyper.items()}
    seen = [i for i, node in enumerate(nodes) if observed.count.get(node.id, 0.0) > 0]
    ids = tuple(node.id for node in nodes)
    if not seen:
        # Both kernels have a unit diagonal, so the prior variance is the sum of the
        # two output scales: no matrix to build.
        variance = float(hyper64["graph_scale"].sum() + hyper64["feature_scale"].sum())
        return Posterior(ids, np.zeros(len(nodes)), np.full(len(nodes), math.sqrt(variance)))
    if session is None or not session.matches(nodes):
        session = GpSession(nodes)
    with session.lock, torch.no_grad():
        index = torch.tensor(seen)
        train_y = torch.tensor([observed.mean[nodes[i].id] for i in seen], dtype=torch.float64)
        noise = torch.tensor(
            [float(hyper64["noise"]) / observed.count[nodes[i].id] for i in seen],
            dtype=torch.float64,
        ).clamp_min(1e-8)
        model = session.model
        model.graph.base_kernel.parts = graph_parts(nodes, observed)
        session.likelihood.noise = noise
        model.set_train_data(session.x[index], train_y, strict=False)
        model.set_hyper(hyper64)
        with warnings.catch_warnings():
            # Predicting at every machine includes the observed ones: intended here.
            warnings.simplefilter("ignore", gpytorch.utils.warnings.GPInputWarning)
            latent = model(session.x)
        mean = latent.mean.numpy()
        std = latent.variance.clamp_min(0.0).sqrt().numpy()
    # Machines the GP cannot tell apart (same type and rack, none observed) have equal
    # posteriors in exact arithmetic, but the solve leaves them a few ulps apart, and which
    # one comes out ahead depends on the BLAS kernels of the CPU: the placement's ranking
    # (and a simulation's result) then changed from one machine to another. Rounded to a
    # billionth of a log factor, far below anything the data can say, such machines tie,
    # and the ranking breaks the tie by its own rule (free GPUs, then snapshot order).
    return Posterior(
        ids,
        np.round(np.asarray(mean, dtype=np.float64), POSTERIOR_DECIMALS),
        np.round(np.asarray(std, dtype=np.float64), POSTERIOR_DECIMALS),
    )
