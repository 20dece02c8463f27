"""Training DL2 (Peng et al., 2019, §4.2–4.3): supervised warm-up, then RL in the simulator.

- :mod:`training.dl2.episodes`: simulated episodes cut from the shared traces;
- :mod:`training.dl2.logged`: simulated episodes of the jobs a decision log saw;
- :mod:`training.dl2.rollout`: the DL2 policy playing a simulation, step by step;
- :mod:`training.dl2.imitation`: cross-entropy on an incumbent's decisions;
- :mod:`training.dl2.reinforce`: PPO with a learned value baseline and an entropy bonus;
- :mod:`training.dl2.evaluation`: a candidate against the active model or a heuristic.
"""
