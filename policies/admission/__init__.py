"""Admission policies, one per file."""
