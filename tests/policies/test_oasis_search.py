"""OASiS's schedule search: its faster forms give exactly what the plain forms give.

The search (Bao, Peng, Wu, Li, INFOCOM 2018, §IV) reuses a job shape's slot-cost
table within a decision, runs a job that accepts one worker count through a
programme on its reachable states only, lays out workers from servers kept ranked by
one worker's cost, and runs these and the programme's steps compiled.
All must be exact: the same numbers, the same layouts, the same choice among equal
costs.
"""

from __future__ import annotations

import math
import random
from unittest.mock import patch

import msgspec
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from policies.common import oasis
from policies.common._oasis import MarketCells, OneCount, numpy_sum
from policies.common.oasis import (
    Frame,
    JobModel,
    Market,
    OasisParams,
    OasisState,
    _cheapest,
    _curve,
    _fitting,
    _Ladder,
    _laid,
    _lay,
    _least_rate,
    _Programme,
    _ranked_costs,
    _ranked_costs_at_once,
    _WayPayoff,
    job_utility,
    model_job,
    search_schedule,
    worker_costs,
)
from policies.model import Job, Node, SigmoidUtility, StepUtility, Utility
from tests.policies.builders import job, node, running, snap

SLOT = 600.0

costs = st.one_of(
    st.sampled_from([0.5, 1.0, 2.0, 3.0, math.inf]),
    st.floats(min_value=0.0, max_value=10.0, allow_nan=False),
)


def _ways(vector: _Programme) -> list[tuple[int, int, int, float]]:
    """The ways to finish in the slot the programme last stepped, as `Finish` lists them:
    by count, then state, for each count that can run and does some work, each state
    short of done that one slot's work of it completes, at a finite cost."""
    before, _, units = vector.history[-1]
    top = vector.total
    return [
        (i, d, u, float(before[d]) + c)
        for i, (u, c) in enumerate(zip(units.tolist(), vector.costs[-1].tolist(), strict=True))
        if u > 0 and math.isfinite(c)
        for d in range(max(top - u, 0), top)
        if math.isfinite(float(before[d]) + c)
    ]


def _assert_same_finishes(small: OneCount, vector: _Programme, t: int) -> None:
    """Both forms offer the same ways to finish in slot t, in the same order, and
    backtrack each way to the same runs: a schedule that finishes in t."""
    ways = _ways(vector)
    assert small.finishing() == ways
    for index, before, _, _ in ways:
        entry = (index, before)
        runs = vector.backtrack(t, entry)
        assert small.backtrack(t, entry) == runs
        assert runs[t] == index
        # A schedule that runs in consecutive slots, ends in t and does all the work.
        assert sorted(runs) == list(range(min(runs), t + 1))
        assert sum(int(vector.history[s][2][c]) for s, c in runs.items()) >= vector.total


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=40),
    first=st.integers(min_value=0, max_value=12),
    whole=st.integers(min_value=1, max_value=12),
    slot_costs=st.lists(costs, min_size=1, max_size=14),
)
def test_one_count_programme_matches_the_vector_programme(
    total: int, first: int, whole: int, slot_costs: list[float]
) -> None:
    vector = _Programme(total)
    reachable = OneCount(total)
    for t, drawn in enumerate(slot_costs):
        units = first if t == 0 else whole
        cost = drawn if units > 0 else math.inf
        expected = vector.step(np.array([units]), np.array([cost]))
        assert reachable.step(units, cost) == expected
        _assert_same_finishes(reachable, vector, t)
        if math.isfinite(expected):
            assert reachable.backtrack(t) == vector.backtrack(t)


def _stepped(
    done: list[float], units: list[int], cost: list[float], top: int
) -> tuple[list[float], list[int]]:
    """The programme's recurrence written out plainly, option by option: what running
    nothing (at 0 and at done only) or each count leaves each state at, the earlier
    option kept among equal costs."""
    after, choice = [math.inf] * (top + 1), [0] * (top + 1)
    after[0], after[top] = done[0], done[top]
    for option, (u, c) in enumerate(zip(units, cost, strict=True), start=1):
        if not math.isfinite(c):
            continue
        for d in range(top + 1):
            if d == top:
                value = min(done[max(top - u, 0) :]) + c  # any start within a slot's work
            elif d >= u:
                value = done[d - u] + c
            else:
                continue
            if value < after[d]:
                after[d], choice[d] = value, option
    return after, choice


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=64),
    counts=st.integers(min_value=1, max_value=6),
    data=st.data(),
)
def test_the_compiled_programme_steps_as_the_recurrence_says(
    total: int, counts: int, data: st.DataObject
) -> None:
    """Each slot's least costs and chosen options, and the ways to finish in it, are
    those of the recurrence written out plainly, ties and counts that cannot run
    included."""
    units = st.lists(st.integers(min_value=0, max_value=20), min_size=counts, max_size=counts)
    first, whole = data.draw(units), data.draw(units)
    slots = data.draw(st.integers(min_value=1, max_value=12))
    vector = _Programme(total)
    plain = vector.done.tolist()
    for t in range(slots):
        now = first if t == 0 else whole
        drawn = data.draw(st.lists(costs, min_size=counts, max_size=counts))
        # As the search gives them: a count that does no whole unit cannot run.
        cost = [c if u > 0 else math.inf for c, u in zip(drawn, now, strict=True)]
        before = plain
        plain, choice = _stepped(plain, now, cost, total)
        assert vector.step(np.array(now), np.array(cost)) == plain[total]
        assert vector.done.tolist() == plain
        assert vector.history[-1][1].tolist() == choice
        assert _ways(vector) == [
            (i, d, u, before[d] + c)
            for i, (u, c) in enumerate(zip(now, cost, strict=True))
            if u > 0 and math.isfinite(c)
            for d in range(max(total - u, 0), total)
            if math.isfinite(before[d] + c)
        ]


def test_reused_slot_cost_tables_equal_fresh_ones_after_every_commit() -> None:
    params = OasisParams(slot_s=SLOT, horizon_slots=12)
    nodes = [node(f"n{i}", gpus=4, cpus=16, memory_gb=64) for i in range(5)]
    nodes.append(node("cpu", gpus=0, cpus=32, memory_gb=128))
    jobs = [
        job(
            f"j{i}",
            admitted=False,
            submit_time=float(i),
            workers=1 + i % 3,
            max_workers=(1 + i % 3) if i % 2 else 4,
            estimated_duration_s=SLOT * (1 + i % 4),
            cpus_per_worker=2.0 * (i % 2),
            ps=1 if i % 3 == 0 else 0,
            ps_cpus=4.0,
        )
        for i in range(30)
    ]
    snapshot = snap(nodes, jobs, now=SLOT / 3)
    market = Market.build(
        snapshot, params, OasisState(slot_s=SLOT), (np.full(3, 1e-3), np.full(3, 0.5))
    )
    calls = committed = 0
    for one in jobs:
        utility, implied = job_utility(one, params)
        assert utility is not None
        model = model_job(one, utility, implied, params)
        for start, stop in ((0, 8), (8, 12)):
            calls += 1
            table = market.slot_costs(model, start, stop)
            fresh = market.layouts(model, np.arange(start, stop))
            assert np.array_equal(table.cost, fresh.cost)
            assert np.array_equal(table.nodes, fresh.nodes)
            if table.laid is not None and fresh.laid is not None:
                assert np.array_equal(table.laid[0], fresh.laid[0])
                assert (table.laid[1] is None) == (fresh.laid[1] is None)
            for name in ("fit", "before", "unit", "free_at", "duplicate", "ps_unit"):
                kept, made = getattr(table.frame, name), getattr(fresh.frame, name)
                assert (kept is None) == (made is None)
                if kept is not None and made is not None:
                    assert np.array_equal(kept, made)
        best = search_schedule(market, model).best
        if best is not None and best.payoff > 0:
            market.commit(model, best)
            committed += 1
    assert committed > 5, "the cluster fills up over the round"
    assert len(market._tables) < calls, "later jobs find tables of their shape"


@settings(max_examples=300, deadline=None)
@given(
    rows=st.lists(
        st.lists(st.sampled_from([0.5, 1.0, 2.0, math.inf]), min_size=2, max_size=40),
        min_size=1,
        max_size=6,
    ).filter(lambda rows: len({len(r) for r in rows}) == 1),
    data=st.data(),
)
def test_cheapest_servers_break_ties_by_lowest_index(
    rows: list[list[float]], data: st.DataObject
) -> None:
    # Which of several equally cheap servers a plan takes must not depend on the
    # machine's NumPy build: the lowest indices win, as a stable sort would order them.
    cost = np.array(rows)
    count = data.draw(st.integers(min_value=1, max_value=cost.shape[1]))
    picked = _cheapest(cost, count)
    assert picked.shape == (cost.shape[0], min(count, cost.shape[1]))
    for row, chosen in zip(cost, picked, strict=True):
        expected = np.sort(np.argsort(row, kind="stable")[:count])
        assert list(np.sort(chosen)) == list(expected)


class _TablesOnly(Market):
    """The market searched by slot-cost tables alone (no ranked form)."""

    def ladder(self, model: JobModel) -> _Ladder | None:
        return None


def _random_round(seed: int) -> tuple[OasisParams, list[Node], list[Job]]:
    rng = random.Random(seed)
    nodes = [
        node(
            f"n{i}",
            gpus=rng.choice([2, 4, 8, 8]),
            cpus=rng.choice([16, 64]),
            memory_gb=rng.choice([96, 256]),
            gpu_memory_gb=rng.choice([16.0, 16.0, 40.0]),
        )
        for i in range(rng.randint(3, 12))
    ]
    busy = [
        running(
            f"r{i}", {n.id: (0,)}, submit_time=0.0, estimated_duration_s=SLOT * rng.randint(1, 6)
        )
        for i, n in enumerate(nodes)
        if rng.random() < 0.4
    ]
    jobs = []
    for i in range(40):
        workers = rng.choice([1, 1, 2, 3, 4, 8, 9])
        jobs.append(
            job(
                f"j{i}",
                admitted=False,
                submit_time=float(i),
                workers=workers,
                max_workers=workers + rng.choice([0, 0, 1, 4, 12]),
                gpus_per_worker=rng.choice([1, 1, 2, 3, 4, 6, 8]),
                # Workers that need CPUs and memory as well, which may bind first.
                cpus_per_worker=rng.choice([0.0, 0.0, 3.0, 8.0]),
                memory_gb_per_worker=rng.choice([0.0, 0.0, 24.0, 40.0]),
                gpu_memory_gb=rng.choice([0.0, 0.0, 24.0]),
                estimated_duration_s=SLOT * rng.uniform(0.3, 5.0),
            )
        )
    params = OasisParams(slot_s=SLOT, horizon_slots=rng.choice([6, 20]))
    return params, nodes, [*busy, *jobs]


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10**6))
def test_ranked_servers_give_the_schedules_the_slot_tables_give(seed: int) -> None:
    """On random clusters, jobs judged one after another (each admission raising the
    prices the next sees) get the same costs, schedules and layouts by the ranked form
    as by the slot-cost tables, whatever their workers need of each resource."""
    params, nodes, jobs = _random_round(seed)
    snapshot = snap(nodes, jobs, now=SLOT / 3)
    bounds = (np.full(3, 1e-3), np.full(3, 0.5))
    ranked = Market.build(snapshot, params, OasisState(slot_s=SLOT), bounds)
    tables = _TablesOnly.build(snapshot, params, OasisState(slot_s=SLOT), bounds)
    for one in snapshot.jobs:
        if one.admitted is not False:
            continue
        utility, implied = job_utility(one, params)
        assert utility is not None
        model = model_job(one, utility, implied, params)
        ladder = ranked.ladder(model)
        assert ladder is not None
        for t in range(params.horizon_slots):
            table = tables.layouts(model, np.array([t]))
            walk = ranked.ranked(ladder, t)
            assert _ranked_costs(walk, ladder.counts, ladder.width) == table.cost[0].tolist()
        found, plain = search_schedule(ranked, model).best, search_schedule(tables, model).best
        assert (found is None) == (plain is None)
        if found is None or plain is None:
            continue
        assert found.segments == plain.segments
        assert (found.utility, found.cost) == (plain.utility, plain.cost)
        assert np.array_equal(found.cost_by_resource, plain.cost_by_resource)
        assert np.array_equal(found.held, plain.held)
        for mine, theirs in zip(found.cells, plain.cells, strict=True):
            assert np.array_equal(mine, theirs)
        if found.payoff > 0:
            ranked.commit(model, found)
            tables.commit(model, plain)
    assert np.array_equal(ranked.prices, tables.prices)
    # The free amounts the commits wrote are those the use gives, in every slot.
    for market in (ranked, tables):
        left = np.maximum(market.capacity[None] - market.used, 0.0)
        assert np.array_equal(market.freed(params.horizon_slots), left)


@settings(max_examples=300, deadline=None)
@given(
    value=st.floats(min_value=1e-3, max_value=1e6),
    scale=st.floats(min_value=1.0, max_value=1e6),
    steepness=st.floats(min_value=1e-2, max_value=50.0),
    elapsed=st.lists(st.floats(min_value=-1e7, max_value=1e8), min_size=1, max_size=20),
)
def test_the_compiled_search_values_a_finish_as_the_utility_does(
    value: float, scale: float, steepness: float, elapsed: list[float]
) -> None:
    """The compiled one-count search evaluates both kinds of utility to the bit, the
    deadline itself and exponents past the overflow guard included."""
    sigmoid = SigmoidUtility(value=value, midpoint_s=scale, steepness=steepness)
    step = StepUtility(value=value, deadline_s=scale)
    for utility in (sigmoid, step):
        curve = _curve(utility)
        for at in [*elapsed, scale]:
            assert curve.value_at(at) == utility.value_at(at)


@settings(max_examples=300, deadline=None)
@given(
    terms=st.lists(st.floats(min_value=0.0, max_value=1e6), min_size=0, max_size=300),
    extra=st.integers(min_value=0, max_value=40),
)
def test_sums_are_added_in_numpys_order(terms: list[float], extra: int) -> None:
    width = len(terms) + extra
    if width == 0:
        return
    padded = np.array([*terms, *[0.0] * extra])
    assert numpy_sum(terms, width) == np.add.reduce(padded)


@settings(max_examples=300, deadline=None)
@given(
    total=st.integers(min_value=1, max_value=120),
    counts=st.integers(min_value=1, max_value=40),
    data=st.data(),
)
def test_the_best_way_to_finish_is_the_one_walking_every_way_keeps(
    total: int, counts: int, data: st.DataObject
) -> None:
    """`_Programme.best_way`, which evaluates few ways, and `walked_best`, which walks
    them compiled, keep the way (and payoff) that walking all of `finishing` in order
    and keeping each strictly better one keeps: ties included, which coarse costs and a
    step utility make common."""
    units = st.lists(st.integers(min_value=0, max_value=40), min_size=counts, max_size=counts)
    first, whole = data.draw(units), data.draw(units)
    vector = _Programme(total)
    utilities: list[Utility] = [
        StepUtility(value=12.0, deadline_s=1_000.0),
        StepUtility(value=5.0, deadline_s=1_300.0),
        SigmoidUtility(value=30.0, midpoint_s=900.0, steepness=4.0),
        SigmoidUtility(value=8.0, midpoint_s=5_000.0),
    ]
    utility = data.draw(st.sampled_from(utilities))
    for t in range(data.draw(st.integers(min_value=1, max_value=8))):
        now = first if t == 0 else whole
        drawn = data.draw(st.lists(costs, min_size=counts, max_size=counts))
        cost = [c if u > 0 else math.inf for c, u in zip(drawn, now, strict=True)]
        vector.step(np.array(now), np.array(cost))
        length = data.draw(st.sampled_from([SLOT, SLOT / 3]))
        end = 600.0 + SLOT * (t + 1)
        payoff = _WayPayoff(utility.value_at, 0.0, end, length, total)
        at_start = utility.value_at(end - length)
        best = data.draw(st.sampled_from([-math.inf, -2.0, 0.0, 4.0]))
        walked: tuple[float, float, tuple[int, int, int, float]] | None = None
        highest = best
        for way in _ways(vector):
            value, done_at = payoff(way[1], way[2], way[3])
            if value > highest:
                highest, walked = value, (value, done_at, way)
        assert vector.best_way(at_start, best, payoff) == walked
        # The compiled walk of every way keeps the same one.
        kept = vector.walked_best(end, length, 0.0, _curve(utility), best)
        if walked is None:
            assert kept is None
        else:
            assert kept == (walked[0], walked[1], walked[2][0], walked[2][1])
        ways = _ways(vector)
        if ways:
            before, runs, paid = (np.array([w[k] for w in ways]) for k in (1, 2, 3))
            bounds = payoff.most(before, runs, paid.astype(np.float64))
            assert all(payoff(*w[1:])[0] <= b for w, b in zip(ways, bounds.tolist(), strict=True))


def test_a_count_is_laid_out_alone_as_it_is_among_thousands_of_counts() -> None:
    """A job accepting every count from 1 to 3,000 (workers needing CPUs, servers to
    place) is costed a chunk of counts at a time; each count's cost and layout, worked
    out for it alone, are the table's."""
    params = OasisParams(slot_s=SLOT, horizon_slots=8)
    nodes = [node(f"n{i}", gpus=8, cpus=32, memory_gb=128) for i in range(12)]
    nodes.append(node("cpu", gpus=0, cpus=64, memory_gb=256))
    busy = running("busy", {"n0": (0, 1, 2, 3), "n3": tuple(range(8))}, cpus_per_worker=2.0)
    wide = job(
        "wide",
        admitted=False,
        workers=4,
        min_workers=1,
        max_workers=3000,
        estimated_duration_s=SLOT * 3,
        cpus_per_worker=2.0,
        ps=2,
        ps_cpus=4.0,
    )
    snapshot = snap(nodes, [busy, wide], now=SLOT / 3)
    market = Market.build(
        snapshot, params, OasisState(slot_s=SLOT), (np.full(3, 1e-3), np.full(3, 0.5))
    )
    utility, implied = job_utility(wide, params)
    assert utility is not None
    model = model_job(wide, utility, implied, params)
    table = market.layouts(model, slice(0, 4))
    assert table.frame is not None
    assert np.isinf(table.cost[:, 200:]).all(), "no slot holds 200 workers of 8-GPU nodes' CPUs"
    most_ps = int(model.ps.max())
    for option in [0, 1, 5, 17, 40, 95, 96, 2999]:
        count = slice(option, option + 1)
        cost, fits, workers, servers = _lay(
            table.frame, model.counts[count], model.ps[count], model, most_ps
        )
        alone = np.where(fits, cost, np.inf)[:, 0]
        assert np.array_equal(alone, table.cost[:, option])
        laid, placed = _laid(table.frame, option, model)
        assert servers is not None
        assert np.array_equal(laid, workers[:, 0])
        assert np.array_equal(placed, servers[:, 0])
        if table.laid is not None and option < table.laid[0].shape[1]:
            kept_workers, kept_servers = table.laid
            assert kept_servers is not None
            assert np.array_equal(kept_workers[:, option], laid)
            assert np.array_equal(kept_servers[:, option], placed)


def _servers_sorted_per_count(
    frame: Frame, counts: np.ndarray, ps: np.ndarray, model: JobModel, most_ps: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The plain form of placing a job's servers: for each count on its own, the
    candidates with room sorted by one server's cost (ties by position), those without
    room last; the servers fill them in that order. (cost, fits, servers per candidate)."""
    assert frame.free_at is not None
    assert frame.duplicate is not None
    assert frame.ps_unit is not None
    workers = np.minimum(
        np.maximum(counts[None, :, None] - frame.before[:, None, :], 0), frame.fit[:, None, :]
    )
    cost = (workers * frame.unit[:, None, :]).sum(axis=2)
    fits = frame.fit.sum(axis=1)[:, None] >= counts[None, :]
    left = frame.free_at[:, None, :, :] - workers[..., None] * model.worker_demand
    room = np.where(frame.duplicate[:, None, :], 0, _fitting(left, model.ps_demand, most_ps))
    ps_unit = frame.ps_unit[:, None, :].repeat(len(counts), axis=1)
    order = np.argsort(np.where(room > 0, ps_unit, np.inf), axis=2, kind="stable")
    room_o = np.take_along_axis(room, order, axis=2)
    unit_o = np.where(room_o > 0, np.take_along_axis(ps_unit, order, axis=2), 0.0)
    placed = np.clip(ps[None, :, None] - (np.cumsum(room_o, axis=2) - room_o), 0, room_o)
    on_each = np.zeros_like(placed)
    np.put_along_axis(on_each, order, placed, axis=2)
    return cost + (placed * unit_o).sum(axis=2), fits & (room_o.sum(axis=2) >= ps), on_each


def test_servers_are_placed_as_sorting_the_costs_for_each_count_places_them() -> None:
    """Servers placed with one sort of the costs per slot land where a sort per count put
    them, with bit-identical costs: ties in a server's cost, candidates without room,
    duplicated candidates, room that each count's workers take in turn, and more or
    fewer than eight paid candidates among more or fewer than eight (random frames: 300
    seeds, so that the rare orders of addition that change a sum's last bit turn up)."""
    params = OasisParams(slot_s=SLOT, horizon_slots=4)
    elastic = job(
        "j", workers=1, min_workers=1, max_workers=60, cpus_per_worker=2.0, ps=1, ps_cpus=2.0
    )
    utility, implied = job_utility(elastic, params)
    assert utility is not None
    model = model_job(elastic, utility, implied, params)
    assert (model.ps_demand > 0).any(), "servers need room: candidates hold few or none"
    for seed in range(300):
        rng = np.random.default_rng(seed)
        slots, width = int(rng.integers(1, 4)), int(rng.integers(1, 25))
        fit = rng.integers(0, 5, size=(slots, width))
        frame = Frame(
            fit=fit,
            before=np.cumsum(fit, axis=1) - fit,
            unit=np.where(fit > 0, rng.choice([0.5, 1.0, 1.5], size=fit.shape), 0.0),
            free_at=rng.choice([0.0, 1.0, 2.0, 4.0, 7.0, 16.0], size=(slots, width, 3)),
            duplicate=rng.random((slots, width)) < 0.2,
            # Few distinct costs (ties), most not summing exactly (the order of additions
            # shows in the last bit).
            ps_unit=rng.choice([0.1, 0.3, *(rng.random(3) * 7)], size=(slots, width)),
        )
        wanted = np.unique(rng.integers(1, 61, size=int(rng.integers(1, 31))))
        ps = rng.integers(0, int(rng.integers(1, 15)) + 1, size=len(wanted))
        most_ps = int(ps.max())
        cost, fits, _, servers = _lay(frame, wanted, ps, model, most_ps)
        plain_cost, plain_fits, plain_servers = _servers_sorted_per_count(
            frame, wanted, ps, model, most_ps
        )
        assert servers is not None
        assert np.array_equal(servers, plain_servers), seed
        assert np.array_equal(fits, plain_fits), seed
        assert cost.tobytes() == plain_cost.tobytes(), seed


@settings(max_examples=200, deadline=None)
@given(
    walk=st.lists(
        st.tuples(st.integers(min_value=1, max_value=8), st.floats(min_value=0.0, max_value=50.0)),
        max_size=40,
    ),
    extra=st.integers(min_value=0, max_value=30),
    counts=st.lists(st.integers(min_value=1, max_value=300), min_size=1, max_size=60),
    chunk=st.sampled_from([8, 64, 1 << 18]),
)
def test_many_counts_are_costed_at_once_as_one_at_a_time(
    walk: list[tuple[int, float]], extra: int, counts: list[int], chunk: int
) -> None:
    """Each count's cost summed with NumPy, a chunk of counts at a time, is the sum the
    one-count form adds in NumPy's order: workers fill the walked candidates in order."""
    candidates = [(h, fit, cost) for h, (fit, cost) in enumerate(walk)]
    width = len(candidates) + extra
    if width == 0:
        return
    room = sum(fit for _, fit, _ in candidates)
    expected = []
    for count in counts:
        terms, before = [], 0
        for _, fit, cost in candidates:
            if count - before <= 0:
                break
            terms.append(min(count - before, fit) * cost)
            before += fit
        expected.append(math.inf if count > room else numpy_sum(terms, width))
    with patch.object(oasis, "_LAID_AT_ONCE", chunk):
        assert _ranked_costs_at_once(candidates, counts, width, room) == expected


def _bounds_as_written(
    jobs: list[Job], now: float, params: OasisParams, horizon_end: float
) -> tuple[list[float], list[float]]:
    """The price bounds' loop as the paper's design reads (the Python that the compiled
    `price_bounds` replaced): the oracle of the test below."""
    ceiling = [0.0] * 3
    floor = [math.inf] * 3
    for j in jobs:
        utility, _ = job_utility(j, params)
        if utility is None:
            continue
        elapsed_now = max(0.0, now - j.submit_time)
        best = utility.value_at(elapsed_now)
        if best <= 0:
            continue
        dw = (float(j.gpus_per_worker), j.cpus_per_worker, j.memory_gb_per_worker)
        dps = (0.0, j.ps_cpus, j.ps_memory_gb) if j.ps else (0.0, 0.0, 0.0)
        for k in range(3):
            holds = min(d for d in (dw[k], dps[k]) if d > 0) if dw[k] or dps[k] else 0.0
            if holds > 0:
                ceiling[k] = max(ceiling[k], best / holds)
        late = utility.value_at(horizon_end - j.submit_time)
        if late <= 0:
            late = (
                utility.value
                if isinstance(utility, StepUtility) and utility.deadline_s >= elapsed_now
                else 0.0
            )
        if late <= 0:
            continue
        slots = max(1, math.ceil(oasis.remaining_at_request_s(j, params) / params.slot_s))
        need = [slots * (j.workers * dw[k] + j.ps * dps[k]) for k in range(3)]
        types = sum(1 for n in need if n > 0)
        for k in range(3):
            if need[k] > 0:
                floor[k] = min(floor[k], late / (4.0 * params.eta * types * need[k]))
    return floor, ceiling


def _random_job(rng: random.Random, index: int, now: float) -> Job:
    utility: dict[str, object] | None = rng.choice(
        [
            None,
            {
                "kind": "sigmoid",
                "value": rng.uniform(0.1, 50.0),
                "midpoint_s": rng.uniform(60.0, 40_000.0),
                "steepness": rng.uniform(0.2, 8.0),
            },
            {
                "kind": "step",
                "value": rng.uniform(0.1, 50.0),
                "deadline_s": rng.uniform(10.0, 200_000.0),
            },
        ]
    )
    fields: dict[str, object] = {
        "submit_time": now - rng.choice([0.0, rng.uniform(0.0, 300_000.0), -50.0]),
        "gpus_per_worker": rng.choice([1, 2, 4, 8]),
        "workers": rng.randint(1, 16),
        "cpus_per_worker": rng.choice([0.0, 1.0, 4.0, 2.5]),
        "memory_gb_per_worker": rng.choice([0.0, 8.0, 30.5]),
        "executed_time_s": rng.choice([0.0, rng.uniform(0.0, 50_000.0)]),
        "utility": utility,
    }
    if rng.random() < 0.4:
        fields.update(
            ps=rng.randint(1, 4),
            ps_cpus=rng.choice([0.0, 2.0, 8.0, 0.5]),
            ps_memory_gb=rng.choice([0.0, 16.0, 4.0]),
        )
    if rng.random() < 0.7:
        fields["estimated_duration_s"] = rng.uniform(30.0, 100_000.0)
    if rng.random() < 0.4:
        fields.update(total_work=rng.uniform(1.0, 1000.0), work_done=rng.uniform(0.0, 1200.0))
    return job(f"j{index}", **fields)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_compiled_price_bounds_are_those_the_paper_design_gives(seed: int) -> None:
    rng = random.Random(seed)
    now = rng.uniform(0.0, 10**6)
    params = OasisParams(
        slot_s=rng.choice([60.0, 600.0, 1800.0]),
        eta=rng.choice([0.5, 1.0, 3.0]),
        implied_value_per_gpu_hour=rng.choice([0.0, 1.0, 2.5]),
    )
    jobs = [_random_job(rng, i, now) for i in range(rng.randint(0, 40))]
    horizon_end = now + params.slot_s * rng.randint(1, 400)
    floor, ceiling = _bounds_as_written(jobs, now, params, horizon_end)
    got_floor, got_ceiling = oasis.estimate_bounds(
        snap([node("n0")], jobs, now=now), params, horizon_end
    )
    expected_floor, expected_ceiling = oasis._clamped(np.array(floor), np.array(ceiling), params)
    # Bit for bit: the same operations in the same order.
    assert got_floor.tobytes() == expected_floor.tobytes()
    assert got_ceiling.tobytes() == expected_ceiling.tobytes()


@settings(max_examples=200, deadline=None)
@given(
    prices=st.lists(
        st.tuples(*[st.floats(min_value=1e-6, max_value=1e6)] * 3), min_size=1, max_size=20
    ),
    demand=st.tuples(*[st.sampled_from([0.0, 0.5, 1.0, 3.0, 4.0, 24.0, 0.3])] * 3),
)
def test_a_workers_cost_is_its_terms_added_in_resource_order(
    prices: list[tuple[float, float, float]], demand: tuple[float, float, float]
) -> None:
    """The cost the table form and the compiled rankings share: each needed resource's
    price times its demand, the first term then each next one added, on any processor."""
    costs = worker_costs(np.array(prices), np.array(demand))
    for row, cost in zip(prices, costs.tolist(), strict=True):
        terms = [p * d for p, d in zip(row, demand, strict=True) if d > 0]
        expected = 0.0
        if terms:
            expected = terms[0]
            for term in terms[1:]:
                expected = expected + term
        assert cost == expected


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(min_value=0, max_value=10**6))
def test_a_markets_starting_use_adds_its_rows_as_add_at_does(seed: int) -> None:
    """Rows of use (slots [start, stop) of a server, overlapping freely) added by the
    compiled part leave every cell as `np.add.at` over the rows' cells, in order, does."""
    rng = np.random.default_rng(seed)
    slots, servers, n = 6, 4, int(rng.integers(1, 30))
    start = rng.integers(0, slots, n)
    stop = np.minimum(slots, start + rng.integers(0, 4, n))
    rows = np.column_stack(
        [
            start,
            stop,
            rng.integers(0, servers, n),
            np.zeros(n, dtype=np.int64),
            np.zeros(n, dtype=np.int64),
        ]
    ).astype(np.int64)
    held = rng.uniform(0.0, 3.0, (n, 3)) * rng.choice([1e-3, 1.0, 1e3], (n, 3))
    used = rng.uniform(0.0, 2.0, (slots, servers, 3))
    expected = used.copy()
    length = stop - start
    which = np.repeat(np.arange(n), length)
    offset = np.arange(len(which)) - np.repeat(np.cumsum(length) - length, length)
    np.add.at(expected, (start[which] + offset, rows[which, 2]), held[which])
    capacity = np.ones((servers, 3))
    cells = MarketCells(
        used, capacity, np.zeros_like(used), np.zeros_like(used), np.zeros(slots, dtype=np.int64)
    )
    cells.add_rows(rows, held)
    assert np.array_equal(used, expected)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(min_value=0, max_value=2**32 - 1))
def test_the_least_rate_is_what_the_array_formula_gives(seed: int) -> None:
    """The floor price of a second of a job's work, worked out on plain floats, is bit
    for bit what the same formula on arrays gives: each count's use at the floor prices
    (terms in resource order) over a slot's work, the least of the counts that progress."""
    rng = random.Random(seed)
    params = OasisParams(slot_s=rng.choice([60.0, 600.0, 1800.0]))
    one = _random_job(rng, 0, 0.0)
    one = msgspec.structs.replace(
        one,
        max_workers=one.workers + rng.choice([0, 3, 40]),
        speedup=rng.choice([{}, {1: 1.0, 2: 0.0, 4: 2.5}, {2: 1.7, 8: 5.5}]),
    )
    snapshot = snap([node("n0"), node("n1", gpus=4)], [one])
    floor = np.array([rng.choice([0.0, 1e-3, 0.37]) for _ in range(3)])
    market = Market.build(snapshot, params, OasisState(slot_s=params.slot_s), (floor, floor * 9))
    utility, implied = job_utility(one, params)
    model = model_job(one, utility or SigmoidUtility(value=1.0, midpoint_s=1.0), implied, params)
    use = model.counts[:, None] * model.worker_demand[None, :] + (
        model.ps[:, None] * model.ps_demand[None, :]
    )
    work = params.slot_s * model.speed
    held = worker_costs(use, market.floor)
    expected = np.where(work > 0, held / np.maximum(work, 1e-9), np.inf).min()
    assert _least_rate(market, model, work.tolist()) == float(expected)
