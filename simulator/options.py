"""Types of command-line options shared by Arbiter's commands (argparse `type=`).

Each refuses a value out of range with the option named, as argparse words it
(`argument --seed: must be from 0 to 2147483647: -1`), before anything runs. Light on
purpose: building the command line imports this module, and nothing heavy.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

MAX_SEED = 2**31 - 1
"""Seeds are 31-bit, as the simulator derives its draws from them (and as the API takes)."""


def whole_number(minimum: int, maximum: int | None = None) -> Callable[[str], int]:
    """An option's type: a whole number from `minimum` (to `maximum`, when given)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if maximum is None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum} or more: {text}")
        if maximum is not None and not minimum <= value <= maximum:
            raise argparse.ArgumentTypeError(f"must be from {minimum} to {maximum}: {text}")
        return value

    return parse


def finite_number(minimum: float | None = None) -> Callable[[str], float]:
    """An option's type: a finite number (`minimum` or more, when given)."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"not a finite number: {text!r}")
        if minimum is not None and value < minimum:
            raise argparse.ArgumentTypeError(f"must be {minimum:g} or more: {text}")
        return value

    return parse


seed = whole_number(0, MAX_SEED)
count = whole_number(0)
at_least_one = whole_number(1)
seconds = finite_number(0.0)
