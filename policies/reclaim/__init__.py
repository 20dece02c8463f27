"""Reclaim policies, one per file; `impact` holds what they share."""
