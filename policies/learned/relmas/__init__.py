"""RELMAS (Blanco et al., DAC 2024): featurizer, set-encoder policy network, shipped model.

The dispatch policy that serves it is :mod:`policies.dispatch.relmas`; the trainer is
in `training.relmas`; docs/relmas.md gives the state, action and reward.
"""
