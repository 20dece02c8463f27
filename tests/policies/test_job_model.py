"""The job's speed-up and remaining-time figures, one count at a time and many at once."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.policies.builders import job

hints = st.dictionaries(
    st.integers(min_value=-2, max_value=64),
    st.floats(min_value=0.0, max_value=80.0, allow_nan=False),
    max_size=12,
)
counts = st.lists(st.integers(min_value=-1, max_value=80), max_size=40)


@settings(max_examples=300, deadline=None)
@given(speedup=hints, wanted=counts)
def test_speedups_of_many_counts_are_each_counts_own(
    speedup: dict[int, float], wanted: list[int]
) -> None:
    """`speedups_at` sorts the hints once; every figure is `speedup_at`'s, to the bit:
    a hinted count, one between hints, below the first, beyond the last, none hinted."""
    one = job("j", workers=4, max_workers=80, speedup=speedup)
    assert one.speedups_at(wanted) == [one.speedup_at(w) for w in wanted]


@settings(max_examples=300, deadline=None)
@given(
    speedup=hints,
    wanted=st.lists(st.integers(min_value=1, max_value=80), max_size=40),
    requested=st.integers(min_value=1, max_value=16),
    estimate=st.one_of(st.none(), st.floats(min_value=1.0, max_value=1e6)),
    executed=st.floats(min_value=0.0, max_value=1e5),
)
def test_remaining_times_of_many_counts_are_each_counts_own(
    speedup: dict[int, float],
    wanted: list[int],
    requested: int,
    estimate: float | None,
    executed: float,
) -> None:
    one = job(
        "j",
        workers=requested,
        max_workers=80,
        speedup=speedup,
        estimated_duration_s=estimate,
        executed_time_s=executed,
    )
    many = one.remaining_times_s(wanted)
    if estimate is None:
        assert many is None
    else:
        assert many == [one.remaining_time_s(w) for w in wanted]
