"""Trainers for Arbiter's learned policies: imitation, RL in the simulator, evaluation.

Imports `policies` and `simulator`, never `app` or `storage`: the service hands a
trainer plain records (decision-log rows as dicts) and stores what it returns.
"""
