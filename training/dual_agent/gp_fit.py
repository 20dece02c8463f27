"""Fitting RWGP's hyperparameters: exact marginal likelihood on the simulator's feedback.

What each training episode's feedback taught the GP (the per-machine summaries
under `rwgp` at the episode's end) is one data set; the graph kernel's diffusion
rate and edge weights, the two output scales, the feature lengthscales and the
observation noise maximise the summed exact marginal log-likelihood of them
(gpytorch's `ExactMarginalLogLikelihood`, Adam), as the GP literature fits kernel
hyperparameters (Rasmussen & Williams, 2006, §5.4). Machines differ between
episodes (each seed draws its own), so what is learned is how machine speeds
covary, not which machine is fast.

The observed-speed edges are left out of the fit and their weight is set to
`OBSERVED_EDGE_WEIGHT` (ours): they are built from the very observations the
likelihood scores, so the likelihood rewards them for explaining the data with
itself. Fitted with them, their weight rose to 4.3 while the type and rack
edges fell to 0.03, and the error on unobserved machines grew.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import gpytorch
import torch

from policies.learned.dual_agent.gp import EDGE_KINDS, MachineGp, graph_parts, inputs
from policies.learned.dual_agent.network import DualAgentModel
from policies.model import Node
from policies.placement.rwgp import observations_of
from policies.protocols import StateValue

OBSERVED = EDGE_KINDS.index("observed_speed")
OBSERVED_EDGE_WEIGHT = 0.01
"""Weight of the observed-speed edges, not fitted (ours): small, so they join machines
whose observed speeds agree without outweighing the type and rack structure."""


def fit_gp(
    model: DualAgentModel,
    data: Sequence[tuple[Sequence[Node], StateValue]],
    *,
    steps: int = 40,
    learning_rate: float = 0.05,
) -> list[float]:
    """Adam on the GP hyperparameters of `model` (in place); the loss after each step."""
    sets = []
    for nodes, state in data:
        observed = observations_of(state)
        seen = [i for i, node in enumerate(nodes) if node.id in observed.count]
        if len(seen) < 2:
            continue
        x = inputs(nodes)
        index = torch.tensor(seen)
        y = torch.tensor([observed.mean[nodes[i].id] for i in seen], dtype=torch.float64)
        counts = torch.tensor([observed.count[nodes[i].id] for i in seen], dtype=torch.float64)
        parts = graph_parts(nodes, observed).clone()
        parts[OBSERVED] = 0.0
        sets.append((x[index], y, counts, parts))
    if not sets:
        return []
    optimizer = torch.optim.Adam(model.gp.parameters(), lr=learning_rate)
    losses: list[float] = []
    for _ in range(steps):
        optimizer.zero_grad()
        hyper = {k: v.to(torch.float64) for k, v in model.gp.positive().items()}
        total = torch.zeros((), dtype=torch.float64)
        for x, y, counts, parts in sets:
            likelihood = gpytorch.likelihoods.FixedNoiseGaussianLikelihood(
                noise=(hyper["noise"] / counts).clamp_min(1e-8)
            )
            gp = MachineGp(x, y, likelihood, parts).double()
            _bind(gp, hyper)
            gp.train()
            likelihood.train()
            mll = gpytorch.mlls.ExactMarginalLogLikelihood(likelihood, gp)
            total = total - mll(gp(x), y)
        loss = total / len(sets)
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()
        losses.append(float(loss.detach()))
    with torch.no_grad():
        model.gp.raw_edge_weights[OBSERVED] = math.log(math.expm1(OBSERVED_EDGE_WEIGHT))
    return losses


def _bind(gp: MachineGp, hyper: dict[str, torch.Tensor]) -> None:
    """Make the gpytorch kernel read the (differentiable) hyperparameters of `hyper`.

    gpytorch keeps raw parameters of its own; replacing its constrained values by
    views of ours lets gradients reach :class:`GpHyper`.
    """
    graph = gp.graph.base_kernel
    del graph.raw_beta, graph.raw_edge_weights
    graph.raw_beta = graph.raw_beta_constraint.inverse_transform(hyper["beta"])
    graph.raw_edge_weights = graph.raw_edge_weights_constraint.inverse_transform(
        hyper["edge_weights"]
    )
    del gp.graph.raw_outputscale, gp.features.raw_outputscale
    gp.graph.raw_outputscale = gp.graph.raw_outputscale_constraint.inverse_transform(
        hyper["graph_scale"].squeeze()
    )
    gp.features.raw_outputscale = gp.features.raw_outputscale_constraint.inverse_transform(
        hyper["feature_scale"].squeeze()
    )
    rbf = gp.features.base_kernel
    del rbf.raw_lengthscale
    rbf.raw_lengthscale = rbf.raw_lengthscale_constraint.inverse_transform(
        hyper["lengthscale"].reshape(1, -1)
    )
