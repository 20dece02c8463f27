"""Placement policies, one per file."""
