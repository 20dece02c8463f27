"""Wording shared by the reasons every policy gives: counts with their noun agreeing."""

from __future__ import annotations


def counted(number: float, noun: str) -> str:
    """`1 worker`, `2 workers`, `0.5 GPUs`: the number (floats as `:g`) and its noun.

    English plurals of the nouns reasons use take an `s` (worker, GPU, server, CPU, job).
    """
    text = f"{number:g}" if isinstance(number, float) else str(number)
    return f"{text} {noun}" if number == 1 else f"{text} {noun}s"
