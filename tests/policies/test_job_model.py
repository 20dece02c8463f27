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


@settings(max_examples=300, deadline=None)
@given(
    lo=st.integers(min_value=1, max_value=40),
    span=st.integers(min_value=0, max_value=200),
    step=st.integers(min_value=1, max_value=9),
    offset=st.integers(min_value=0, max_value=200),
    power_of_two=st.booleans(),
)
def test_accepted_counts_are_those_the_job_accepts_in_order(
    lo: int, span: int, step: int, offset: int, power_of_two: bool
) -> None:
    """Listed or spaced as a range, the counts are ascending, hold the request, and are
    exactly the counts of the bounds that `accepts_workers` accepts."""
    hi = lo + span
    workers = lo + offset % (span + 1)
    rule = "power_of_two" if power_of_two else "linear"
    if power_of_two and not any(lo <= 1 << k <= hi for k in range(hi.bit_length())):
        return
    one = job(
        "j", workers=workers, min_workers=lo, max_workers=hi, worker_step=step, scaling_rule=rule
    )
    counts = list(one.allowed_worker_counts())
    assert counts == sorted(set(counts))
    assert workers in counts
    assert counts == [w for w in range(lo, hi + 1) if one.accepts_workers(w)]
