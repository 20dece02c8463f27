"""DL2 (Peng et al., 2019): featurizer, policy network and the model shipped with Arbiter.

The scaling policy that serves it is :mod:`policies.scaling.dl2`; the trainers that
produce it are in `training.dl2`; docs/dl2.md says how the pieces fit.
"""
