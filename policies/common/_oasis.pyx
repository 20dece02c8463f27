# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""OASiS's schedule search, compiled in part.

Bao, Peng, Wu and Li, "Online Job Scheduling in Distributed Machine Learning Clusters"
(INFOCOM 2018), §IV: for each arriving job, the schedule subroutine lays its workers out
greedily on the servers where one more worker costs least, slot by slot, and a dynamic
programme over the slots finds its schedule of best payoff. :mod:`policies.common.oasis`
is the account of the algorithm and its Python; this module holds, as typed arrays, the
parts every search and commit repeats per slot, per state and per cell: the ranked
form's columns, rankings and walks (:meth:`Market.ranked`), each count's sum, the
one-count programme and the loop over slots of a job of one count, the vector
programme's step, its walk over the ways to finish and the loop over slots of a job of
a few counts, a ranked schedule's layouts and plan segments, the market's arrays
(:class:`MarketCells`: the use a market starts with, a commit's use, shares of
capacity, prices, free amounts and column updates) and the price bounds' loop over
every job.

Every figure is the one the Python form made: the same IEEE operations on doubles in
the same order (the build turns off floating-point contraction), the same order of
(cost, server) entries, the same choice among equal values, the same sums
(:func:`numpy_sum` adds as NumPy's ``add.reduce`` does). The golden decisions and the
property tests of tests/policies/test_oasis_search.py judge it.
"""

import numpy as np

from libc.math cimport INFINITY, ceil, exp, floor, isfinite
from libc.stdlib cimport free as c_free
from libc.stdlib cimport malloc, realloc

cdef extern from *:
    const char* OASIS_SOURCE_SHA256  # defined by the build (setup.py)

SOURCE_SHA256 = OASIS_SOURCE_SHA256.decode("ascii")
"""SHA-256 of the source this module was built from."""

cdef double EPS = 1e-9


cdef enum:
    MAX_KINDS = 3  # resources a column holds (policies.common.oasis.RESOURCES)


cdef class Column:
    """Every resource of every server in one slot (servers × resources), copied from the
    market's arrays and kept in step by :meth:`MarketCells.commit`, and its rankings by
    the demand of a worker."""

    cdef double[:, ::1] _prices
    cdef double[:, ::1] _free
    cdef public dict ranks
    # Servers a walk has met (a flag per server, cleared at the walk's end).
    cdef unsigned char[::1] _seen

    def __init__(self, prices, free):
        self._prices = np.array(prices, dtype=np.float64, order="C")
        self._free = np.array(free, dtype=np.float64, order="C")
        if self._prices.shape[1] > MAX_KINDS:
            raise ValueError(f"a column holds at most {MAX_KINDS} resources")
        self._seen = np.zeros(self._prices.shape[0], dtype=np.uint8)
        self.ranks = {}

    cdef int set(
        self, Py_ssize_t server, const double[:, :] prices, const double[:, :] free, Py_ssize_t i
    ) except -1:
        """A commit changed the server's use: its new prices and free amounts, row `i` of
        `prices` and `free`. Each ranking whose worker now costs otherwise there gets an
        entry at the new cost, if one still fits."""
        cdef SlotRank rank
        cdef Py_ssize_t k, kinds = self._prices.shape[1]
        cdef double before[MAX_KINDS]
        cdef double cost
        for k in range(kinds):
            before[k] = self._prices[server, k]
            self._prices[server, k] = prices[i, k]
            self._free[server, k] = free[i, k]
        for rank in self.ranks.values():
            cost = rank.cost_of(&self._prices[server, 0])
            if cost != rank.cost_of(before) and rank.has_room(&self._free[server, 0]):
                rank.push(cost, server)
        return 0


cdef inline bint _before(double p1, Py_ssize_t h1, double p2, Py_ssize_t h2) noexcept:
    """(p1, h1) < (p2, h2), as Python orders the tuples."""
    return p1 < p2 or (p1 == p2 and h1 < h2)


cdef void _sift_down(double* costs, Py_ssize_t* servers, Py_ssize_t n, Py_ssize_t i) noexcept:
    """Move entry i of a binary min-heap on (cost, server) of n entries down to its
    place."""
    cdef double p = costs[i]
    cdef Py_ssize_t h = servers[i], child
    while True:
        child = 2 * i + 1
        if child >= n:
            break
        if child + 1 < n and _before(
            costs[child + 1], servers[child + 1], costs[child], servers[child]
        ):
            child += 1
        if not _before(costs[child], servers[child], p, h):
            break
        costs[i] = costs[child]
        servers[i] = servers[child]
        i = child
    costs[i] = p
    servers[i] = h


cdef class SlotRank:
    """The servers of one slot with room for a worker of `demand` (one amount per
    resource), in order of (cost of one worker, index): the order the table form fills
    them.

    A worker's cost on a server is the price of each resource it needs times its demand,
    added in resource order (:func:`policies.common.oasis.worker_costs`, the same
    operations); it fits where every resource it needs holds a whole worker.
    The order when it was made, sorted as far as walks have read it (two arrays; the
    rest waits in a heap, taken in order as a walk reaches it: a walk mostly reads a
    few servers of hundreds), and a heap of (cost, server) entries pushed when a
    commit changes a server's cost. An entry stands while its server
    still costs that and has room; a walk drops the others where it meets them,
    so every server with room appears once, at its current cost. Servers without
    room are left out: use only grows within a decision, so none regains it.
    """

    cdef readonly tuple demand
    # The resources the worker needs, and how much of each.
    cdef Py_ssize_t _needs[MAX_KINDS]
    cdef double _amounts[MAX_KINDS]
    cdef Py_ssize_t _kinds
    cdef double* _order_costs
    cdef Py_ssize_t* _order_servers
    cdef Py_ssize_t _size
    cdef Py_ssize_t _sorted  # entries of the order known; the others wait in `_rest`
    cdef double* _rest_p
    cdef Py_ssize_t* _rest_h
    cdef Py_ssize_t front  # entries of the order before it are known to stand no more
    # The heap: parallel arrays of costs and servers, a binary min-heap on (cost, server).
    cdef double* _heap_p
    cdef Py_ssize_t* _heap_h
    cdef Py_ssize_t _heap_n
    cdef Py_ssize_t _heap_cap

    def __init__(self, tuple demand, Column column):
        cdef Py_ssize_t h, j, n = 0, servers = column._prices.shape[0]
        cdef double amount
        if len(demand) != column._prices.shape[1]:
            raise ValueError(
                f"a demand of {len(demand)} resources for a column of {column._prices.shape[1]}"
            )
        self.demand = demand
        self._kinds = 0
        for j in range(len(demand)):
            amount = demand[j]
            if amount > 0:
                self._needs[self._kinds] = j
                self._amounts[self._kinds] = amount
                self._kinds += 1
        if self._kinds == 0:
            raise ValueError("a ranked worker needs some resource")
        # The servers with room and one worker's cost on each, as a heap on (cost, index):
        # taken from it in order, they come as a stable sort by cost would order them.
        self._order_costs = <double*> _grown(NULL, max(servers, 1) * sizeof(double))
        self._order_servers = <Py_ssize_t*> _grown(NULL, max(servers, 1) * sizeof(Py_ssize_t))
        self._rest_p = <double*> _grown(NULL, max(servers, 1) * sizeof(double))
        self._rest_h = <Py_ssize_t*> _grown(NULL, max(servers, 1) * sizeof(Py_ssize_t))
        for h in range(servers):
            if self.has_room(&column._free[h, 0]):
                self._rest_p[n] = self.cost_of(&column._prices[h, 0])
                self._rest_h[n] = h
                n += 1
        for j in range(n // 2 - 1, -1, -1):
            _sift_down(self._rest_p, self._rest_h, n, j)
        self._sorted = 0
        self._size = n
        self.front = 0
        self._heap_n = 0
        self._heap_cap = 0
        self._heap_p = NULL
        self._heap_h = NULL

    def __dealloc__(self):
        c_free(self._order_costs)
        c_free(self._order_servers)
        c_free(self._rest_p)
        c_free(self._rest_h)
        c_free(self._heap_p)
        c_free(self._heap_h)

    cdef inline double cost_of(self, const double* prices) noexcept:
        """One worker's cost on a server of `prices` (its row: one per resource): the
        first needed resource's term, then each next one added."""
        cdef Py_ssize_t j
        cdef double cost = prices[self._needs[0]] * self._amounts[0]
        for j in range(1, self._kinds):
            cost = cost + prices[self._needs[j]] * self._amounts[j]
        return cost

    cdef inline bint has_room(self, const double* free) noexcept:
        """Whether one worker fits on a server with `free` (its row): ⌊free/d + ε⌋ ≥ 1
        for every resource it needs."""
        cdef Py_ssize_t j
        for j in range(self._kinds):
            if free[self._needs[j]] / self._amounts[j] + EPS < 1.0:
                return False
        return True

    cdef inline Py_ssize_t fit_of(self, const double* free, Py_ssize_t most) noexcept:
        """Workers that fit on a server with `free` (its row), as the table form computes
        it: the least over the resources of ⌊free/d + ε⌋, at most `most` (it has room
        for one)."""
        cdef Py_ssize_t j
        cdef double least = floor(free[self._needs[0]] / self._amounts[0] + EPS)
        cdef double fits
        for j in range(1, self._kinds):
            fits = floor(free[self._needs[j]] / self._amounts[j] + EPS)
            if fits < least:
                least = fits
        if least > most:
            return most
        return <Py_ssize_t> least

    cdef int push(self, double p, Py_ssize_t h) except -1:
        cdef Py_ssize_t i, parent, cap
        if self._heap_n == self._heap_cap:
            cap = 16 if self._heap_cap == 0 else 2 * self._heap_cap
            self._heap_p = <double*> _grown(self._heap_p, cap * sizeof(double))
            self._heap_h = <Py_ssize_t*> _grown(self._heap_h, cap * sizeof(Py_ssize_t))
            self._heap_cap = cap
        i = self._heap_n
        self._heap_n += 1
        while i > 0:
            parent = (i - 1) >> 1
            if not _before(p, h, self._heap_p[parent], self._heap_h[parent]):
                break
            self._heap_p[i] = self._heap_p[parent]
            self._heap_h[i] = self._heap_h[parent]
            i = parent
        self._heap_p[i] = p
        self._heap_h[i] = h
        return 0

    cdef void pop(self) noexcept:
        """Drop the least entry."""
        self._heap_n -= 1
        if self._heap_n == 0:
            return
        self._heap_p[0] = self._heap_p[self._heap_n]
        self._heap_h[0] = self._heap_h[self._heap_n]
        _sift_down(self._heap_p, self._heap_h, self._heap_n, 0)

    cdef inline void _reach(self, Py_ssize_t i) noexcept:
        """Sort the order as far as entry i (< its size), from the heap of the rest."""
        cdef Py_ssize_t left
        while self._sorted <= i:
            self._order_costs[self._sorted] = self._rest_p[0]
            self._order_servers[self._sorted] = self._rest_h[0]
            self._sorted += 1
            left = self._size - self._sorted  # entries still in the heap
            if left > 0:
                self._rest_p[0] = self._rest_p[left]
                self._rest_h[0] = self._rest_h[left]
                _sift_down(self._rest_p, self._rest_h, left, 0)

    cpdef list walk(self, Column column, Py_ssize_t most, object small):
        """The servers, in order, that `most` workers fill (skipping those `small` flags):
        (server, workers that fit, cost of one worker), until they hold `most` workers
        or none is left."""
        cdef double[:, ::1] prices = column._prices
        cdef double[:, ::1] free = column._free
        cdef unsigned char[::1] seen = column._seen
        cdef const unsigned char[::1] too_small
        cdef bint has_small = small is not None
        cdef double p
        cdef Py_ssize_t h, i, need, fit, k
        cdef Py_ssize_t n_held = 0
        cdef list out = []
        cdef list met = []
        if has_small:
            too_small = small
        if most == 1 and not has_small:
            return self._first(prices, free)
        held_p = <double*> malloc(max(self._heap_n, 1) * sizeof(double))
        held_h = <Py_ssize_t*> malloc(max(self._heap_n, 1) * sizeof(Py_ssize_t))
        if held_p == NULL or held_h == NULL:
            c_free(held_p)
            c_free(held_h)
            raise MemoryError()
        try:
            need = most
            i = self.front
            while need > 0:
                # Drop heap entries that stand no more, or whose server was met.
                while self._heap_n:
                    h = self._heap_h[0]
                    if (
                        self.cost_of(&prices[h, 0]) == self._heap_p[0]
                        and self.has_room(&free[h, 0])
                        and not seen[h]
                    ):
                        break
                    self.pop()
                if i < self._size:
                    self._reach(i)
                if i < self._size and (
                    self._heap_n == 0
                    or _before(
                        self._order_costs[i], self._order_servers[i],
                        self._heap_p[0], self._heap_h[0],
                    )
                ):
                    p = self._order_costs[i]
                    h = self._order_servers[i]
                    i += 1
                    if (
                        self.cost_of(&prices[h, 0]) != p
                        or not self.has_room(&free[h, 0])
                        or seen[h]
                    ):
                        if i - 1 == self.front:
                            self.front = i
                        continue
                elif self._heap_n:
                    p = self._heap_p[0]
                    h = self._heap_h[0]
                    self.pop()
                    # Taken off the heap while it stands: put back after the walk.
                    held_p[n_held] = p
                    held_h[n_held] = h
                    n_held += 1
                else:
                    break
                seen[h] = 1
                met.append(h)
                if has_small and too_small[h]:
                    continue
                fit = self.fit_of(&free[h, 0], most)
                out.append((h, fit, p))
                need -= fit
            for k in range(n_held):
                self.push(held_p[k], held_h[k])
        finally:
            c_free(held_p)
            c_free(held_h)
            for h in met:
                seen[h] = 0
        return out

    cdef list _first(self, double[:, ::1] prices, double[:, ::1] free):
        """:meth:`walk` for one worker on any server: the first standing entry, looked at
        and left in place (the stale ones before it are dropped, as a walk drops them)."""
        cdef Py_ssize_t h = 0, i
        cdef double p = 0.0
        while self._heap_n:
            h = self._heap_h[0]
            if self.cost_of(&prices[h, 0]) == self._heap_p[0] and self.has_room(&free[h, 0]):
                break
            self.pop()
        i = self.front
        while i < self._size:
            self._reach(i)
            p = self._order_costs[i]
            h = self._order_servers[i]
            if self.cost_of(&prices[h, 0]) == p and self.has_room(&free[h, 0]):
                break
            i += 1
            self.front = i
        if i < self._size and (
            self._heap_n == 0 or _before(p, h, self._heap_p[0], self._heap_h[0])
        ):
            return [(h, 1, p)]
        if self._heap_n:
            return [(self._heap_h[0], 1, self._heap_p[0])]
        return []


def ranked_costs(candidates, counts, Py_ssize_t width):
    """Full-slot cost of each count laid out on `candidates` ((server, fit, cost) in
    fill order), inf where they cannot hold it; each count's `width` terms summed as
    NumPy sums a row of the table form."""
    cdef Py_ssize_t n = len(candidates)
    cdef Py_ssize_t room = 0, j, count, before, left, fit, used
    cdef double* fits_cost = <double*> malloc(max(n, 1) * sizeof(double))
    cdef Py_ssize_t* fits = <Py_ssize_t*> malloc(max(n, 1) * sizeof(Py_ssize_t))
    cdef double* terms = <double*> malloc(max(width, n, 1) * sizeof(double))
    cdef list out = []
    if fits_cost == NULL or fits == NULL or terms == NULL:
        c_free(fits_cost)
        c_free(fits)
        c_free(terms)
        raise MemoryError()
    try:
        for j in range(n):
            entry = candidates[j]
            fits[j] = entry[1]
            fits_cost[j] = entry[2]
            room += fits[j]
        for count in counts:
            if count > room:
                out.append(INFINITY)
                continue
            before = 0
            used = 0
            for j in range(n):
                left = count - before
                if left <= 0:
                    break
                fit = fits[j]
                terms[used] = (left if left < fit else fit) * fits_cost[j]
                used += 1
                before += fit
            out.append(_sum(terms, used, width))
    finally:
        c_free(fits_cost)
        c_free(fits)
        c_free(terms)
    return out


def numpy_sum(terms, Py_ssize_t width):
    """The sum NumPy's `add.reduce` gives over `width` values: `terms`, then zeros."""
    cdef Py_ssize_t n = len(terms), j
    cdef double* values = <double*> malloc(max(width, n, 1) * sizeof(double))
    if values == NULL:
        raise MemoryError()
    try:
        for j in range(n):
            values[j] = terms[j]
        return _sum(values, n, width)
    finally:
        c_free(values)


cdef double _sum(double* terms, Py_ssize_t used, Py_ssize_t width) noexcept:
    """`used` terms, then zeros up to `width` (`terms` has room for them), summed as
    NumPy does: one after another from 0 below 8 values; from 8 on, eight running sums
    combined pairwise and the rest added, blocks above 128 split in halves. The zeros
    change nothing in the sequential form but move the terms' places in the other."""
    cdef double total = 0.0
    cdef Py_ssize_t j
    if width < 8:
        for j in range(used):
            total += terms[j]
        return total
    for j in range(used, width):
        terms[j] = 0.0
    return _pairwise(terms, width)


cdef double _pairwise(double* values, Py_ssize_t n) noexcept:
    cdef double r[8]
    cdef double total
    cdef Py_ssize_t i, j, half
    if n < 8:
        total = 0.0
        for j in range(n):
            total += values[j]
        return total
    if n <= 128:
        for j in range(8):
            r[j] = values[j]
        i = 8
        while i < n - n % 8:
            for j in range(8):
                r[j] += values[i + j]
            i += 8
        total = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
        while i < n:
            total += values[i]
            i += 1
        return total
    half = n // 2
    half -= half % 8
    return _pairwise(values, half) + _pairwise(values + half, n - half)


cdef class OneCount:
    """The schedule subroutine's dynamic programme for a job that accepts one worker
    count only (the paper's §IV subroutine; :class:`policies.common.oasis._Programme`
    is its general form).

    The same recurrence, the same sums in the same order and the same choice among
    equal costs as the general form, on the states that can be reached: a job with one
    count that has started runs every slot until done, so after slot t the work done is
    0, all of it, or the units of one run of consecutive slots ending at t (one state
    per start). The runs are kept newest first, so by units done, never falling: each
    slot adds the same units to every run and puts the new run, with the fewest, in
    front. Every slot's runs stay in one buffer (a slot's list is written once, after
    the lists before it), for the backtrack.
    """

    cdef readonly Py_ssize_t total
    cdef double top  # least cost of being done
    # The runs of every slot so far, one list after another: units done, least cost.
    cdef long long* _done
    cdef double* _cost
    cdef Py_ssize_t _used, _room
    cdef Py_ssize_t _mid_at, _mid_len  # the current runs
    # Per slot stepped: where its runs before it lie, the cost of being done before it,
    # whether finishing in it beats having finished earlier, its units and its cost.
    cdef Py_ssize_t* _h_at
    cdef Py_ssize_t* _h_len
    cdef double* _h_top
    cdef unsigned char* _h_better
    cdef long long* _h_units
    cdef double* _h_cost
    cdef Py_ssize_t _slots, _slot_room

    def __init__(self, Py_ssize_t total):
        self.total = total
        self.top = INFINITY
        self._used = self._room = 0
        self._mid_at = self._mid_len = 0
        self._slots = self._slot_room = 0

    def __dealloc__(self):
        c_free(self._done)
        c_free(self._cost)
        c_free(self._h_at)
        c_free(self._h_len)
        c_free(self._h_top)
        c_free(self._h_better)
        c_free(self._h_units)
        c_free(self._h_cost)

    cdef int _reserve_runs(self, Py_ssize_t more) except -1:
        cdef Py_ssize_t room
        if self._used + more <= self._room:
            return 0
        room = max(64, 2 * self._room, self._used + more)
        self._done = <long long*> _grown(self._done, room * sizeof(long long))
        self._cost = <double*> _grown(self._cost, room * sizeof(double))
        self._room = room
        return 0

    cdef int _reserve_slot(self) except -1:
        cdef Py_ssize_t room
        if self._slots < self._slot_room:
            return 0
        room = max(16, 2 * self._slot_room)
        self._h_at = <Py_ssize_t*> _grown(self._h_at, room * sizeof(Py_ssize_t))
        self._h_len = <Py_ssize_t*> _grown(self._h_len, room * sizeof(Py_ssize_t))
        self._h_top = <double*> _grown(self._h_top, room * sizeof(double))
        self._h_better = <unsigned char*> _grown(self._h_better, room * sizeof(unsigned char))
        self._h_units = <long long*> _grown(self._h_units, room * sizeof(long long))
        self._h_cost = <double*> _grown(self._h_cost, room * sizeof(double))
        self._slot_room = room
        return 0

    def step(self, long long units, double cost):
        """Advance one slot that does `units` at `cost` (inf: it cannot run); the least
        cost of being done by its end."""
        return self.advance(units, cost)

    cdef double advance(self, long long units, double cost) except? -1.0:
        cdef long long top = self.total
        cdef long long lowest
        cdef Py_ssize_t cut, j, at
        cdef double tail, finish
        cdef bint better
        self._reserve_slot()
        cdef Py_ssize_t s = self._slots
        self._h_at[s] = self._mid_at
        self._h_len[s] = self._mid_len
        self._h_top[s] = self.top
        self._h_units[s] = units
        self._h_cost[s] = cost
        self._slots += 1
        if not isfinite(cost):
            self._h_better[s] = 0
            self._mid_at = self._used
            self._mid_len = 0
            return self.top
        lowest = top - units if top > units else 0
        # The least cost among the states this slot's work finishes: 0 done (if one slot
        # is enough), the runs that far along (the tail of the runs) and being done
        # already; min as Python's min picks (a later value only if strictly less).
        cut = self._mid_len
        tail = INFINITY
        at = self._mid_at
        while cut and self._done[at + cut - 1] >= lowest:
            cut -= 1
            if self._cost[at + cut] < tail:
                tail = self._cost[at + cut]
        if lowest == 0 and not tail < 0.0:
            tail = 0.0
        finish = (self.top if self.top < tail else tail) + cost
        better = finish < self.top
        self._h_better[s] = better
        # The runs after this slot: a new one (if one slot does not finish the job),
        # then those it does not finish, each one slot further along.
        self._reserve_runs(cut + 1)
        at = self._mid_at
        j = self._used
        if units < top:
            self._done[j] = units
            self._cost[j] = 0.0 + cost
            j += 1
        for i in range(cut):
            self._done[j] = self._done[at + i] + units
            self._cost[j] = self._cost[at + i] + cost
            j += 1
        self._mid_at = self._used
        self._mid_len = j - self._used
        self._used = j
        if better:
            self.top = finish
        return self.top

    cdef Py_ssize_t first_way(self) noexcept:
        """The ways to finish in the slot last stepped (one that can run and does some
        work), by state: from nothing done when one slot's work is all of it, then from
        each run the slot finishes, the tail of the runs before it. Returns the index of
        the first such run in the slot's runs (`_h_at`, `_h_len`), or -1 standing for
        the way from nothing done (every run can finish then: they did some work)."""
        cdef Py_ssize_t s = self._slots - 1
        cdef long long units = self._h_units[s]
        cdef long long lowest = self.total - units if self.total > units else 0
        cdef Py_ssize_t at = self._h_at[s], cut = self._h_len[s]
        if lowest == 0:
            return -1
        while cut and self._done[at + cut - 1] >= lowest:
            cut -= 1
        return cut

    def finishing(self):
        """Every way to finish in the slot last stepped: (count index 0, units done
        before, the slot's units, least cost), by state, as the general form lists them
        (the ways :func:`search_one_count` walks)."""
        if self._slots == 0:
            raise IndexError("no slot stepped yet")
        cdef Py_ssize_t s = self._slots - 1
        cdef long long units = self._h_units[s]
        cdef double cost = self._h_cost[s]
        cdef Py_ssize_t at = self._h_at[s], j
        cdef list found = []
        if units <= 0 or not isfinite(cost):
            return found
        for j in range(self.first_way(), self._h_len[s]):
            if j < 0:
                found.append((0, 0, units, 0.0 + cost))
            else:
                found.append((0, self._done[at + j], units, self._cost[at + j] + cost))
        return found

    def backtrack(self, Py_ssize_t last, entry=None):
        """Slots run (count index 0) by the cheapest way to be done by slot `last`; with
        `entry` (count index, units done before), by the cheapest way to finish in slot
        `last` from that state."""
        cdef dict runs = {}
        cdef long long top = self.total
        cdef long long done = top
        cdef long long lowest, d
        cdef double least, v
        cdef Py_ssize_t t, j, at
        if not 0 <= last < self._slots:
            raise IndexError(f"slot {last} not stepped ({self._slots} so far)")
        if entry is not None:
            runs[last] = entry[0]
            done = entry[1]
            last -= 1
        for t in range(last, -1, -1):
            if done == 0 or (done == top and not self._h_better[t]):
                continue
            runs[t] = 0
            if done == top:
                # The first state of least cost among those a slot's work finishes:
                # 0 done, the runs before the slot, then being done already.
                lowest = top - self._h_units[t] if top > self._h_units[t] else 0
                least = INFINITY
                if 0 >= lowest and 0.0 < least:
                    done, least = 0, 0.0
                at = self._h_at[t]
                for j in range(self._h_len[t]):
                    d = self._done[at + j]
                    v = self._cost[at + j]
                    if d >= lowest and v < least:
                        done, least = d, v
                if top >= lowest and self._h_top[t] < least:
                    done, least = top, self._h_top[t]
            else:
                done -= self._h_units[t]
        return runs


cdef void* _grown(void* block, size_t size) except NULL:
    """`block` reallocated to `size` bytes (a MemoryError if it cannot be; the block
    given stays allocated then, and its owner frees it)."""
    cdef void* grown = realloc(block, size)
    if grown == NULL:
        raise MemoryError()
    return grown


cdef inline double _curve_at(
    bint sigmoid, double value, double midpoint, double steepness, double deadline,
    double elapsed_s,
) noexcept:
    """A utility's value `elapsed_s` after submission (:class:`UtilityCurve`), from its
    figures: `price_bounds` holds them in locals, one job after another."""
    cdef double exponent
    if sigmoid:
        exponent = steepness * (elapsed_s - midpoint) / midpoint
        # min(exponent, 700.0) as Python's min picks it: past ~700 e^x overflows.
        return value / (1.0 + exp(exponent if not 700.0 < exponent else 700.0))
    return value if elapsed_s <= deadline else 0.0


cdef class UtilityCurve:
    """A job's utility as the search evaluates it (the domain model's `value_at`,
    :mod:`policies.model`): a sigmoid, value / (1 + e^(s·(t − m)/m)), or a step, the
    value up to the deadline and 0 after. The same operations in the same order."""

    cdef bint sigmoid
    cdef double value, midpoint, steepness, deadline

    def __init__(
        self, bint sigmoid, double value, double midpoint=0.0, double steepness=1.0,
        double deadline=0.0,
    ):
        self.sigmoid = sigmoid
        self.value = value
        self.midpoint = midpoint
        self.steepness = steepness
        self.deadline = deadline

    def value_at(self, double elapsed_s):
        return self.at(elapsed_s)

    cdef inline double at(self, double elapsed_s) noexcept:
        return _curve_at(
            self.sigmoid, self.value, self.midpoint, self.steepness, self.deadline, elapsed_s
        )


cdef class SlotSearch:
    """What a job's search over the slots reads in each (:func:`search_one_count`,
    :func:`search_counts`): the horizon and its clock, the job's utility (`utility`,
    the job's own as the compiled parts evaluate it), its submission time and the floor
    cost of its work (the stop rule), whether a finish is valued inside its slot; and,
    on the ranked form (`ladder`, the market's `_Ladder` of the job), the market's
    `columns`, `ranked(t)` for a slot the market has yet to rank, `costs_at_once(walk)`
    for jobs whose (count, candidate) cells exceed `looped_cells`, and `walks`, where
    each slot's walk is kept for the schedule's layouts."""

    cdef bint ranked_form
    cdef object demand, small
    cdef Py_ssize_t most, width
    cdef list counts
    cdef dict columns, walks
    cdef object ranked, costs_at_once
    cdef bint at_once
    cdef Py_ssize_t horizon
    cdef double fraction, slot_s, submit, floor_cost
    cdef long long first_slot
    cdef UtilityCurve utility
    cdef bint within

    def __init__(
        self,
        ladder,
        dict columns,
        ranked,
        costs_at_once,
        Py_ssize_t horizon,
        Py_ssize_t looped_cells,
        double fraction,
        long long first_slot,
        double slot_s,
        double submit,
        double floor_cost,
        UtilityCurve utility,
        bint within,
        dict walks,
    ):
        self.ranked_form = ladder is not None
        if self.ranked_form:
            self.demand, self.most, self.small = ladder.demand, ladder.most, ladder.small
            self.counts, self.width = ladder.counts, ladder.width
            self.at_once = len(self.counts) * self.width > looped_cells
        self.columns, self.walks = columns, walks
        self.ranked, self.costs_at_once = ranked, costs_at_once
        self.horizon, self.fraction, self.first_slot = horizon, fraction, first_slot
        self.slot_s, self.submit, self.floor_cost = slot_s, submit, floor_cost
        self.utility, self.within = utility, within

    cdef list walk(self, Py_ssize_t t):
        """Slot t's walk (:meth:`Market.ranked`), kept in `walks`: the ranking of the
        slot's column walked here, or `ranked(t)` where the market has yet to make it."""
        cdef object column = self.columns.get(t)
        cdef object rank = None if column is None else (<Column> column).ranks.get(self.demand)
        cdef list walk
        if rank is None:
            walk = self.ranked(t)
        else:
            walk = (<SlotRank> rank).walk(<Column> column, self.most, self.small)
        self.walks[t] = walk
        return walk

    cdef list costs(self, list walk):
        """Each count's full-slot cost on `walk`, as `_ranked_costs` works it out."""
        if self.at_once:
            return self.costs_at_once(walk)
        return ranked_costs(walk, self.counts, self.width)

    cdef inline double end(self, Py_ssize_t t) noexcept:
        """When slot t ends, on the caller's clock."""
        return <double> (self.first_slot + t + 1) * self.slot_s

    cdef inline bint stops(self, double value, double best_payoff) noexcept:
        """The stop rule: utility never grows and no schedule costs less than the floor
        prices, so once the utility at a slot's end less that floor cannot beat the best
        payoff (nor pay at all), no later finish can."""
        return value - self.floor_cost <= (0.0 if 0.0 > best_payoff else best_payoff)


def search_one_count(
    OneCount one,
    SlotSearch search,
    rows,
    long long first_units,
    long long full_units,
):
    """The search's loop over slots for a job of one worker count
    (:func:`policies.common.oasis.search_schedule`, whose loop this is, step for step).

    Each slot t: the count's cost in it, a step of `one`, then the best way to finish
    in it, until the utility left cannot beat the best payoff even at floor prices.
    On the ranked form the cost is worked out here from the slot's walk
    (:meth:`SlotSearch.walk`): the current slot pro rata, inf where the slot does no
    whole unit of work, as the Python form does. On the table form `rows` yields each
    slot's (t, [cost]) with all that applied.
    Returns (best payoff, its last slot or -1, when it is done, (count index, units
    done before) of its way into that slot or None, whether the utility stopped it).
    """
    cdef double best_payoff = -INFINITY, best_end = 0.0
    cdef Py_ssize_t best_t = -1, t, at, j
    cdef object entry = None
    cdef bint stopped = False
    cdef double cost, finished, end, value, length, at_start, done_at, payoff, ratio
    cdef double least, fraction = search.fraction, submit = search.submit
    cdef long long units, before, total = one.total
    cdef list walk
    cdef UtilityCurve utility = search.utility
    cdef bint one_worker = search.ranked_form and search.counts[0] == 1
    for t in range(search.horizon):
        units = first_units if t == 0 else full_units
        if not search.ranked_form:
            row_t, row = next(rows)
            assert row_t == t
            cost = row[0]
        else:
            walk = search.walk(t)
            if one_worker:
                cost = walk[0][2] if walk else INFINITY
            else:
                cost = search.costs(walk)[0]
            if t == 0:
                cost = cost * fraction if first_units > 0 else INFINITY
            elif full_units <= 0:
                cost = INFINITY
        finished = one.advance(units, cost)
        end = search.end(t)
        value = utility.at(end - submit)
        if search.within and isfinite(finished):
            # The slot's start bounds the value of a finish inside it; only a schedule
            # that could beat the best so far is followed to where it finishes.
            length = search.slot_s * (fraction if t == 0 else 1.0)
            at_start = utility.at(end - length - submit)
            if at_start - finished > best_payoff and units > 0 and isfinite(cost):
                # The ways to finish in this slot (OneCount.finishing), in its order.
                at = one._h_at[one._slots - 1]
                for j in range(one.first_way(), one._h_len[one._slots - 1]):
                    if j < 0:
                        before, least = 0, 0.0 + cost
                    else:
                        before, least = one._done[at + j], one._cost[at + j] + cost
                    ratio = <double> (total - before) / <double> units
                    done_at = end - length * (1.0 - (ratio if ratio < 1.0 else 1.0))
                    payoff = utility.at(done_at - submit) - least
                    if payoff > best_payoff:
                        best_payoff, best_t, best_end = payoff, t, done_at
                        entry = (0, before)
        elif isfinite(finished) and value - finished > best_payoff:
            best_payoff, best_t, best_end = value - finished, t, end
        if search.stops(value, best_payoff):
            stopped = True
            break
    return best_payoff, best_t, best_end, entry, stopped


cdef class ServerNames:
    """The market's servers by name: each one's node id, and its place among them in
    the order of their ids (a plan lists the nodes of a slot by id)."""

    cdef list ids
    cdef Py_ssize_t* place

    def __init__(self, list ids):
        cdef Py_ssize_t rank, h
        self.ids = list(ids)
        self.place = <Py_ssize_t*> _grown(NULL, max(len(ids), 1) * sizeof(Py_ssize_t))
        for rank, h in enumerate(sorted(range(len(ids)), key=ids.__getitem__)):
            self.place[h] = rank

    def __dealloc__(self):
        c_free(self.place)


cdef void _by_name(Py_ssize_t* servers, Py_ssize_t* workers, Py_ssize_t n, Py_ssize_t* place):
    """Sort a slot's few (server, workers) entries by the servers' places (insertion)."""
    cdef Py_ssize_t i, j, h, w
    for i in range(1, n):
        h, w = servers[i], workers[i]
        j = i - 1
        while j >= 0 and place[servers[j]] > place[h]:
            servers[j + 1], workers[j + 1] = servers[j], workers[j]
            j -= 1
        servers[j + 1], workers[j + 1] = h, w


def ranked_layouts(
    dict walks,
    ordered,
    counts,
    servers,
    dict columns,
    double fraction,
    tuple demand,
    ServerNames names,
    long long first_slot,
    segment,
):
    """The layouts of a schedule found on the ranked form: in each slot it runs (`ordered`:
    (slot, count index), by slot), the count's workers fill that slot's walked
    candidates in order (with `servers[i]` parameter servers, placed on no node).

    Returns the schedule as `segment`s (:class:`policies.common.oasis.Segment`: absolute
    slots from `first_slot`, each slot's nodes by id as (node id, workers, 0), a run of
    consecutive slots with the same layout as one segment); the cells, in order, as
    arrays of their slot, server, workers and parameter servers (none); what each cell
    holds of each resource (workers · `demand`, one worker's amount of each resource);
    and the cost per resource: for each resource, the sum over cells of share · price ·
    workers · demand (the current slot's share pro rata), added one cell after another
    as NumPy reduces those products (a resource the worker does not need costs
    nothing)."""
    cdef list segments = []
    cdef double share
    cdef Py_ssize_t t, option, count, ps, before, workers, server, fit, bound = 0, n = 0, j
    cdef Py_ssize_t kinds = len(demand)
    cdef double per_worker[MAX_KINDS]
    cdef Column column
    # This slot's layout and the run's (the slots before it with the same layout).
    cdef Py_ssize_t* block
    cdef Py_ssize_t* slot_servers
    cdef Py_ssize_t* slot_workers
    cdef Py_ssize_t* run_servers
    cdef Py_ssize_t* run_workers
    cdef Py_ssize_t used, run_used = -1, run_first = 0, run_last = 0, run_count = 0, run_ps = 0
    cdef bint same
    if kinds > MAX_KINDS:
        raise ValueError(f"a worker of {kinds} resources; a column holds {MAX_KINDS}")
    for j in range(kinds):
        per_worker[j] = demand[j]
    by_resource = np.zeros(kinds)
    cdef double[::1] spent = by_resource
    for t, option in ordered:
        bound += len(walks[t])
    # The three integer columns of the cells in one array: one buffer to take, not three.
    cells_array = np.empty((3, bound), dtype=np.int64)
    holds_array = np.empty((bound, kinds))
    cdef long long[:, ::1] cell = cells_array
    cdef double[:, ::1] holds = holds_array
    block = <Py_ssize_t*> _grown(NULL, (4 * bound + 4) * sizeof(Py_ssize_t))
    slot_servers = block
    slot_workers = slot_servers + bound + 1
    run_servers = slot_workers + bound + 1
    run_workers = run_servers + bound + 1
    try:
        for t, option in ordered:
            count, ps = counts[option], servers[option]
            column = columns[t]
            share = fraction if t == 0 else 1.0
            before = 0
            used = 0
            for entry in walks[t]:
                server, fit = entry[0], entry[1]
                workers = count - before if not fit < count - before else fit
                if workers <= 0:
                    break
                slot_servers[used], slot_workers[used] = server, workers
                used += 1
                cell[0, n], cell[1, n], cell[2, n] = t, server, workers
                for j in range(kinds):
                    holds[n, j] = <double> workers * per_worker[j]
                    if per_worker[j] > 0:
                        spent[j] += share * column._prices[server, j] * (workers * per_worker[j])
                n += 1
                before += fit
            _by_name(slot_servers, slot_workers, used, names.place)
            same = (
                run_used == used and run_last + 1 == t and run_count == count and run_ps == ps
            )
            j = 0
            while same and j < used:
                same = run_servers[j] == slot_servers[j] and run_workers[j] == slot_workers[j]
                j += 1
            if same:
                run_last = t
                continue
            if run_used >= 0:
                segments.append(
                    _segment(segment, names, first_slot, run_first, run_last, run_count, run_ps,
                             run_servers, run_workers, run_used)
                )
            run_servers, slot_servers = slot_servers, run_servers
            run_workers, slot_workers = slot_workers, run_workers
            run_used, run_first, run_last, run_count, run_ps = used, t, t, count, ps
        if run_used >= 0:
            segments.append(
                _segment(segment, names, first_slot, run_first, run_last, run_count, run_ps,
                         run_servers, run_workers, run_used)
            )
    finally:
        c_free(block)
    cells = (
        cells_array[0, :n], cells_array[1, :n], cells_array[2, :n], np.zeros(n, dtype=np.int64)
    )
    return segments, cells, holds_array[:n], by_resource


cdef object _segment(
    segment,
    ServerNames names,
    long long first_slot,
    Py_ssize_t first,
    Py_ssize_t last,
    Py_ssize_t count,
    Py_ssize_t ps,
    Py_ssize_t* servers,
    Py_ssize_t* workers,
    Py_ssize_t used,
):
    """Horizon slots `[first, last]` run `count` workers (`workers[j]` on `servers[j]`,
    in order of their ids) and `ps` parameter servers, as a `segment`."""
    cdef Py_ssize_t j
    nodes = tuple([(names.ids[servers[j]], workers[j], 0) for j in range(used)])
    return segment(
        first=first_slot + first, until=first_slot + last + 1, workers=count, ps=ps, nodes=nodes
    )


def programme_step(done, units, cost):
    """One slot of the schedule subroutine's dynamic programme over every work-done
    state (:class:`policies.common.oasis._Programme`): `done[d]` is the least cost of
    having done d units (d = total: all of it) by the end of the slots before. Option 0
    runs nothing (allowed at d = 0 and d = total only: a started job runs every slot
    until done); option i + 1 runs count i for `units[i]` units at `cost[i]` (inf: it
    cannot run), reaching "all done" from any state within a slot's work of the end.
    Returns the least cost of each state after the slot and the option that gives it,
    the first of equal ones (as NumPy's argmin over the options picks it)."""
    cdef const double[::1] before = np.ascontiguousarray(done, dtype=np.float64)
    cdef const long long[::1] run = np.ascontiguousarray(units, dtype=np.int64)
    cdef const double[::1] paid = np.ascontiguousarray(cost, dtype=np.float64)
    after = np.empty(before.shape[0])
    choice = np.empty(before.shape[0], dtype=np.intp)
    _step(before, run, paid, after, choice)
    return after, choice


cdef int _step(
    const double[::1] before,
    const long long[::1] run,
    const double[::1] paid,
    double[::1] out,
    Py_ssize_t[::1] chosen,
) except -1:
    """:func:`programme_step` into `out` and `chosen`."""
    cdef Py_ssize_t top = before.shape[0] - 1, n = paid.shape[0], d, i, best
    cdef long long source
    cdef double least, value
    cdef double* tail = <double*> malloc((top + 1) * sizeof(double))
    if tail == NULL:
        raise MemoryError()
    try:
        # tail[d] = the least of done[d:], as np.minimum.accumulate over the reversed array.
        tail[top] = before[top]
        for d in range(top - 1, -1, -1):
            tail[d] = before[d] if before[d] < tail[d + 1] else tail[d + 1]
        for d in range(top + 1):
            least = before[d] if d == 0 or d == top else INFINITY
            best = 0
            for i in range(n):
                if not isfinite(paid[i]):
                    continue
                source = d - run[i]
                if d == top:
                    value = tail[source if source > 0 else 0] + paid[i]
                elif source < 0:
                    continue
                else:
                    value = before[source] + paid[i]
                if value < least:
                    least = value
                    best = i + 1
            out[d] = least
            chosen[d] = best
    finally:
        c_free(tail)
    return 0


def programme_best_finish(
    done, units, cost, long long total, double end, double length, double submit,
    UtilityCurve utility, double best_payoff,
):
    """Of the ways to finish in a slot of the vector programme, from the states before
    it (`done`), the one the search keeps: walking them by count, then state (for each
    count that can run and does some work, each state short of done that its slot's
    work completes, at a finite cost), each that pays strictly more than the best so
    far. A way from d units
    done, by count i, is done when the work it has left takes the slot's rate, at
    end − length · (1 − min(1, (total − d) / units[i])), and pays the utility then less
    its cost. Returns (payoff, when done, count index, units done before), or None
    when no way pays more than `best_payoff`."""
    cdef const double[::1] before = np.ascontiguousarray(done, dtype=np.float64)
    cdef const long long[::1] run = np.ascontiguousarray(units, dtype=np.int64)
    cdef const double[::1] paid = np.ascontiguousarray(cost, dtype=np.float64)
    cdef Finish kept = _best_finish(
        before, run, paid, total, end, length, submit, utility, best_payoff
    )
    if kept.index < 0:
        return None
    return kept.payoff, kept.done_at, kept.index, kept.before


cdef struct Finish:
    double payoff
    double done_at
    Py_ssize_t index  # -1: none pays more than the best so far
    Py_ssize_t before


cdef Finish _best_finish(
    const double[::1] before,
    const long long[::1] run,
    const double[::1] paid,
    long long total,
    double end,
    double length,
    double submit,
    UtilityCurve utility,
    double best_payoff,
) noexcept:
    """:func:`programme_best_finish`, its way as a struct."""
    cdef Py_ssize_t top = before.shape[0] - 1, n = paid.shape[0], d, i
    cdef long long lowest
    cdef double value, ratio, done_at, payoff
    cdef Finish kept
    kept.payoff, kept.done_at, kept.index, kept.before = best_payoff, 0.0, -1, 0
    for i in range(n):
        if not isfinite(paid[i]) or run[i] <= 0:
            continue
        lowest = top - run[i] if top > run[i] else 0
        for d in range(lowest, top):
            value = before[d] + paid[i]
            if not isfinite(value):
                continue
            ratio = <double> (total - d) / <double> run[i]
            done_at = end - length * (1.0 - (ratio if ratio < 1.0 else 1.0))
            payoff = utility.at(done_at - submit) - value
            if payoff > kept.payoff:
                kept.payoff, kept.done_at, kept.index, kept.before = payoff, done_at, i, d
    return kept


def search_counts(programme, SlotSearch search, first_units, full_units):
    """The search's loop over slots for a job of several worker counts (at most
    `_WALKED_COUNTS`) on the ranked form (:func:`policies.common.oasis.search_schedule`,
    whose loop this is, step for step): each slot's walk, each count's cost in it as
    `_ranked_rows` gives it, a step of the vector `programme` (its `done`, `history`
    and `costs` kept as :class:`policies.common.oasis._Programme` keeps them, for its
    backtrack), then the best way to finish in it, until the utility left cannot beat
    the best payoff even at floor prices. Returns what :func:`search_one_count` returns."""
    cdef double best_payoff = -INFINITY, best_end = 0.0
    cdef Py_ssize_t best_t = -1, t, i
    cdef object entry = None
    cdef bint stopped = False
    cdef double finished, end, value, length, at_start
    cdef double fraction = search.fraction, submit = search.submit
    cdef long long total = programme.total
    cdef Py_ssize_t n = len(search.counts)
    # The unit arrays' views taken once, and each slot's states passed on to the next
    # as the view already taken, not taken again from the array.
    cdef const long long[::1] first_view = first_units, full_view = full_units, units
    cdef list costs
    cdef list history = programme.history, paid_by_slot = programme.costs
    cdef double[::1] paid, done_view, after_view, before
    cdef UtilityCurve utility = search.utility
    cdef Finish kept
    done = programme.done
    done_view = done
    for t in range(search.horizon):
        costs = search.costs(search.walk(t))
        units_array = first_units if t == 0 else full_units
        units = first_view if t == 0 else full_view
        row = np.empty(n)
        paid = row
        for i in range(n):
            if units[i] <= 0:
                paid[i] = INFINITY
            elif t == 0:
                paid[i] = <double> costs[i] * fraction
            else:
                paid[i] = costs[i]
        after = np.empty(total + 1)
        after_view = after
        choice = np.empty(total + 1, dtype=np.intp)
        _step(done_view, units, paid, after_view, choice)
        paid_by_slot.append(row)
        history.append((done, choice, units_array))
        before = done_view
        done, done_view = after, after_view
        programme.done = done
        finished = after_view[total]
        end = search.end(t)
        value = utility.at(end - submit)
        if search.within and isfinite(finished):
            # The slot's start bounds the value of a finish inside it; only a schedule
            # that could beat the best so far is followed to where it finishes.
            length = search.slot_s * (fraction if t == 0 else 1.0)
            at_start = utility.at(end - length - submit)
            if at_start - finished > best_payoff:
                kept = _best_finish(
                    before, units, paid, total, end, length, submit, utility, best_payoff
                )
                if kept.index >= 0:
                    best_payoff, best_end = kept.payoff, kept.done_at
                    best_t, entry = t, (kept.index, kept.before)
        elif isfinite(finished) and value - finished > best_payoff:
            best_payoff, best_t, best_end = value - finished, t, end
        if search.stops(value, best_payoff):
            stopped = True
            break
    return best_payoff, best_t, best_end, entry, stopped


cdef class MarketCells:
    """The market's arrays of use, capacity, prices, free amounts and touched slots
    (:class:`policies.common.oasis.Market`), held once for every commit of a decision
    rather than taken afresh from NumPy per call: a commit changes a few dozen cells,
    and taking an array's buffer costs about as much as writing them."""

    cdef double[:, :, :] _used
    cdef const double[:, :] _capacity
    cdef double[:, :, :] _prices
    cdef double[:, :, :] _free
    cdef long long[:] _touched
    # A commit's shares of capacity (then its prices) and free amounts, cell by
    # resource; the rows of a commit's cells are in use.
    cdef object _shares_array
    cdef double[:, ::1] _shares
    cdef double[:, ::1] _left

    def __init__(self, used, capacity, prices, free, touched):
        self._used = used
        self._capacity = capacity
        self._prices = prices
        self._free = free
        self._touched = touched
        self._shares_array = np.empty((64, self._capacity.shape[1]))
        self._shares = self._shares_array
        self._left = np.empty((64, self._capacity.shape[1]))

    def add_rows(self, rows, held):
        """Add use row by row (`rows[r]`: start and stop slot, server; `held[r]`: what
        it holds of each resource in each of those slots), cell after cell in that
        order, each resource's amount added as `np.add.at` over the rows' cells adds
        it (the same additions in the same order)."""
        cdef const long long[:, :] at = rows
        cdef const double[:, :] adds = held
        cdef Py_ssize_t r, t, k, h, kinds = adds.shape[1]
        for r in range(at.shape[0]):
            h = at[r, 2]
            for t in range(at[r, 0], at[r, 1]):
                for k in range(kinds):
                    self._used[t, h, k] += adds[r, k]

    def commit(self, held, slots, servers, price_in_place, long long commit, dict columns):
        """Add a committed schedule's use at its cells (slot `slots[i]`, server
        `servers[i]`, `held[i]` of each resource; one cell per slot and server), price
        them and write what changed.

        Per cell and resource: the share of capacity now used, clamped to [0, 1] (1
        where there is no capacity), and what is left free (never below 0), NumPy's
        divide, minimum and maximum as :func:`policies.common.oasis.price` applies
        them. `price_in_place` turns the (cells × resources) array of shares into
        prices in place (NumPy's power, as `price` takes it). The new prices and free
        amounts go to the market's arrays, each slot is marked as touched by commit
        number `commit`, and each cell goes to the column kept for its slot, if any
        (cell after cell, so its rankings learn each server's new cost). The shares and
        free amounts live in arrays kept from one commit to the next, their buffers taken
        once, not two new arrays per commit."""
        cdef const double[:, :] adds = held
        cdef const long long[:] at_slot = slots
        cdef const long long[:] at_server = servers
        cdef Py_ssize_t cells = at_slot.shape[0], kinds = self._capacity.shape[1], i, k, t, h
        cdef double now, room, share, left
        if cells > self._shares.shape[0]:
            self._grow(cells)
        cdef double[:, ::1] shares = self._shares
        cdef double[:, ::1] free = self._left
        for i in range(cells):
            t, h = at_slot[i], at_server[i]
            for k in range(kinds):
                now = self._used[t, h, k] + adds[i, k]
                self._used[t, h, k] = now
                room = self._capacity[h, k]
                share = now / room if room > 0 else 1.0
                share = share if share <= 1.0 else 1.0
                shares[i, k] = share if share >= 0.0 else 0.0
                left = room - now
                free[i, k] = left if left >= 0.0 else 0.0
        price_in_place(self._shares_array[:cells])
        for i in range(cells):
            t, h = at_slot[i], at_server[i]
            for k in range(kinds):
                self._prices[t, h, k] = shares[i, k]
                self._free[t, h, k] = free[i, k]
            self._touched[t] = commit
        if columns:
            for i in range(cells):
                column = columns.get(at_slot[i])
                if column is not None:
                    (<Column> column).set(at_server[i], shares, free, i)

    cdef int _grow(self, Py_ssize_t cells) except -1:
        """Room for `cells` cells in the kept arrays of shares and free amounts."""
        cdef Py_ssize_t kinds = self._capacity.shape[1]
        cdef Py_ssize_t size = max(cells, 2 * self._shares.shape[0])
        self._shares_array = np.empty((size, kinds))
        self._shares = self._shares_array
        self._left = np.empty((size, kinds))
        return 0


def price_bounds(
    jobs, double now, double horizon_end, sigmoid_type, double implied_per_gpu_hour,
    double default_duration_s, double implied_midpoint_factor, double slot_s, double eta,
):
    """`estimate_bounds`' loop over the snapshot's jobs (:mod:`policies.common.oasis`):
    (L, U) per resource before clamping, as two lists. Per job it works out again, in
    the same operations and order, what the Python rules give: `job_utility` (the
    implied sigmoid when the job states none), the utility's `value_at`, the late
    utility of `estimate_bounds`' docstring, and `remaining_at_request_s` (through
    `Job.remaining_time_s`); each `min` and `max` keeps its first argument among equals.
    The property test of tests/policies/test_oasis_search.py calls those Python rules
    as they stand, so a change to one that is not made here too fails it."""
    cdef double ceiling[3]
    cdef double floor_[3]
    cdef double dw[3]
    cdef double dps[3]
    cdef double need[3]
    cdef bint sigmoid
    cdef double value, midpoint, steepness, deadline, duration, submit, elapsed_now
    cdef double best, holds, share, late, left, ratio, slots, workers, servers, price
    cdef int k, types
    for k in range(3):
        ceiling[k] = 0.0
        floor_[k] = INFINITY
    for job in jobs:
        utility = job.utility
        midpoint = steepness = deadline = 0.0
        if utility is None:
            if implied_per_gpu_hour <= 0:
                continue
            estimated = job.estimated_duration_s
            duration = estimated if estimated else default_duration_s
            sigmoid = True
            value = implied_per_gpu_hour * <double> job.gpus * duration / 3600.0
            midpoint = implied_midpoint_factor * duration
            steepness = 1.0
        elif isinstance(utility, sigmoid_type):
            sigmoid = True
            value = utility.value
            midpoint = utility.midpoint_s
            steepness = utility.steepness
        else:
            sigmoid = False
            value = utility.value
            deadline = utility.deadline_s
        submit = job.submit_time
        elapsed_now = now - submit
        if not elapsed_now > 0.0:
            elapsed_now = 0.0
        best = _curve_at(sigmoid, value, midpoint, steepness, deadline, elapsed_now)
        if best <= 0:
            continue
        dw[0] = <double> job.gpus_per_worker
        dw[1] = job.cpus_per_worker
        dw[2] = job.memory_gb_per_worker
        servers = <double> job.ps
        dps[0] = 0.0
        if servers:
            dps[1] = job.ps_cpus
            dps[2] = job.ps_memory_gb
        else:
            dps[1] = dps[2] = 0.0
        for k in range(3):
            holds = 0.0
            if dw[k] or dps[k]:
                # The least positive of the two (the first among equals).
                if dw[k] > 0:
                    holds = dps[k] if dps[k] > 0 and dps[k] < dw[k] else dw[k]
                else:
                    holds = dps[k]
            if holds > 0:
                share = best / holds
                if share > ceiling[k]:
                    ceiling[k] = share
        late = _curve_at(sigmoid, value, midpoint, steepness, deadline, horizon_end - submit)
        if not late > 0:
            late = value if not sigmoid and deadline >= elapsed_now else 0.0
        if late <= 0:
            continue
        estimated = job.estimated_duration_s
        total_work = job.total_work
        if estimated is not None:
            if total_work is None:
                left = <double> estimated - job.executed_time_s
                if not left > 0.0:
                    left = 0.0
            else:
                ratio = job.work_done / <double> total_work
                left = <double> estimated * (1.0 - (ratio if ratio < 1.0 else 1.0))
        elif total_work is not None:
            ratio = job.work_done / <double> total_work
            left = default_duration_s * (1.0 - (ratio if ratio < 1.0 else 1.0))
        else:
            left = default_duration_s - job.executed_time_s
        if not left > 1.0:
            left = 1.0
        slots = ceil(left / slot_s)
        if not slots > 1.0:
            slots = 1.0
        workers = <double> job.workers
        types = 0
        for k in range(3):
            need[k] = slots * (workers * dw[k] + servers * dps[k])
            if need[k] > 0:
                types += 1
        for k in range(3):
            if need[k] > 0:
                price = late / (4.0 * eta * types * need[k])
                if price < floor_[k]:
                    floor_[k] = price
    return [floor_[0], floor_[1], floor_[2]], [ceiling[0], ceiling[1], ceiling[2]]
