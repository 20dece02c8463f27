"""Scaling policies, one per file."""
