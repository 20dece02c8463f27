"""Training the dual agent (Xing et al., KDD 2023): MAPPO in the simulator, GP fitting.

- :mod:`training.dual_agent.env`: the simulator as a PettingZoo parallel environment;
- :mod:`training.dual_agent.mappo`: joint MAPPO updates of both agents;
- :mod:`training.dual_agent.gp_fit`: the GP's hyperparameters by marginal likelihood;
- :mod:`training.dual_agent.evaluation`: fee and JCT of a model against another;
- :mod:`training.dual_agent.trainer`: its entry in the trainer registry.
"""
