"""Ordering policies, one per file."""
