"""Types of the compiled part of OASiS's search (policies/common/_oasis.pyx)."""

from collections.abc import Callable, Iterator, Sequence
from typing import Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from policies.model import Job, SigmoidUtility

_S = TypeVar("_S")

class Column:
    ranks: dict[tuple[float, ...], SlotRank]
    def __init__(self, prices: npt.NDArray[np.float64], free: npt.NDArray[np.float64]) -> None: ...

class SlotRank:
    @property
    def demand(self) -> tuple[float, ...]: ...
    def __init__(self, demand: tuple[float, ...], column: Column) -> None: ...
    def walk(
        self, column: Column, most: int, small: bytes | None
    ) -> list[tuple[int, int, float]]: ...

def ranked_costs(
    candidates: Sequence[tuple[int, int, float]], counts: Sequence[int], width: int
) -> list[float]: ...
def numpy_sum(terms: Sequence[float], width: int) -> float: ...

SOURCE_SHA256: str

class OneCount:
    @property
    def total(self) -> int: ...
    def __init__(self, total: int) -> None: ...
    def step(self, units: int, cost: float) -> float: ...
    def finishing(self) -> list[tuple[int, int, int, float]]: ...
    def backtrack(self, last: int, entry: tuple[int, int] | None = None) -> dict[int, int]: ...

class UtilityCurve:
    def __init__(
        self,
        sigmoid: bool,
        value: float,
        midpoint: float = 0.0,
        steepness: float = 1.0,
        deadline: float = 0.0,
    ) -> None: ...
    def value_at(self, elapsed_s: float) -> float: ...

class _Ladder(Protocol):
    """What the search reads of a job shape's ladder (policies.common.oasis._Ladder)."""

    @property
    def demand(self) -> tuple[float, ...]: ...
    @property
    def most(self) -> int: ...
    @property
    def width(self) -> int: ...
    @property
    def counts(self) -> list[int]: ...
    @property
    def small(self) -> bytes | None: ...

class _Vector(Protocol):
    """What the compiled loop reads and keeps of the vector programme
    (policies.common.oasis._Programme)."""

    total: int
    done: npt.NDArray[np.float64]
    history: list[tuple[npt.NDArray[np.float64], npt.NDArray[np.intp], npt.NDArray[np.int64]]]
    costs: list[npt.NDArray[np.float64]]

class SlotSearch:
    def __init__(
        self,
        ladder: _Ladder | None,
        columns: dict[int, Column],
        ranked: Callable[[int], list[tuple[int, int, float]]] | None,
        costs_at_once: Callable[[list[tuple[int, int, float]]], list[float]] | None,
        horizon: int,
        looped_cells: int,
        fraction: float,
        first_slot: int,
        slot_s: float,
        submit: float,
        floor_cost: float,
        utility: UtilityCurve,
        within: bool,
        walks: dict[int, list[tuple[int, int, float]]],
    ) -> None: ...

def search_one_count(
    one: OneCount,
    search: SlotSearch,
    rows: Iterator[tuple[int, list[float] | npt.NDArray[np.float64]]],
    first_units: int,
    full_units: int,
) -> tuple[float, int, float, tuple[int, int] | None, bool]: ...
def search_counts(
    programme: _Vector,
    search: SlotSearch,
    first_units: npt.NDArray[np.int64],
    full_units: npt.NDArray[np.int64],
) -> tuple[float, int, float, tuple[int, int] | None, bool]: ...

class ServerNames:
    def __init__(self, ids: list[str]) -> None: ...

def ranked_layouts(
    walks: dict[int, list[tuple[int, int, float]]],
    ordered: Sequence[tuple[int, int]],
    counts: Sequence[int],
    servers: Sequence[int],
    columns: dict[int, Column],
    fraction: float,
    demand: tuple[float, ...],
    names: ServerNames,
    first_slot: int,
    segment: Callable[..., _S],
) -> tuple[
    list[_S],
    tuple[
        npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]
    ],
    npt.NDArray[np.float64],
    npt.NDArray[np.float64],
]: ...
def programme_step(
    done: npt.NDArray[np.float64], units: npt.NDArray[np.int64], cost: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]: ...
def programme_best_finish(
    done: npt.NDArray[np.float64],
    units: npt.NDArray[np.int64],
    cost: npt.NDArray[np.float64],
    total: int,
    end: float,
    length: float,
    submit: float,
    utility: UtilityCurve,
    best_payoff: float,
) -> tuple[float, float, int, int] | None: ...

class MarketCells:
    def __init__(
        self,
        used: npt.NDArray[np.float64],
        capacity: npt.NDArray[np.float64],
        prices: npt.NDArray[np.float64],
        free: npt.NDArray[np.float64],
        touched: npt.NDArray[np.int64],
    ) -> None: ...
    def add_rows(self, rows: npt.NDArray[np.int64], held: npt.NDArray[np.float64]) -> None: ...
    def commit(
        self,
        held: npt.NDArray[np.float64],
        slots: npt.NDArray[np.int64],
        servers: npt.NDArray[np.int64],
        price_in_place: Callable[[npt.NDArray[np.float64]], None],
        commit: int,
        columns: dict[int, Column],
    ) -> None: ...

def price_bounds(
    jobs: Sequence[Job],
    now: float,
    horizon_end: float,
    sigmoid_type: type[SigmoidUtility],
    implied_per_gpu_hour: float,
    default_duration_s: float,
    implied_midpoint_factor: float,
    slot_s: float,
    eta: float,
) -> tuple[list[float], list[float]]: ...
