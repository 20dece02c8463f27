"""Adapters: other schedulers' wire formats translated to and from Arbiter's snapshot and plans.

Each adapter is pure translation (no I/O): the Kubernetes scheduler extender
(:mod:`app.adapters.k8s`). The services that keep each cluster's view and ask the
engine live in :mod:`app.services`.
"""
