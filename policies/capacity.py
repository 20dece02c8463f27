"""Free capacity of a cluster during one decision.

The engine owns one :class:`FreeCapacity` per decision: it starts from the
snapshot (GPUs held by running jobs are taken), and every placement the engine
accepts is committed to it. Placement policies only *read* it through the
queries below and return assignments; the engine checks and commits them, so a
policy can never give a GPU twice.

Nodes are bucketed by their count of free GPUs, so "the fullest node that still
fits g GPUs" costs O(max GPUs per node), not O(nodes): decisions stay cheap on
snapshots with hundreds of nodes and thousands of jobs. The free GPUs, CPUs and
memory of every node are also kept as arrays, so what each node could take of a
job with CPU or memory needs is computed for all nodes at once.

What the engine asks for every job (`take`, the GPUs of running jobs, a node's lowest
free GPUs, the best fit by GPU count, found or found and taken, the room for a job's
shape, `never_fits`) and the node and rack counts of a spread job are compiled:
:class:`FreeCapacity` extends `policies._capacity.CapacityCore`, which holds those and
the state they read. Everything else is here.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import ClassVar, TypeVar

import msgspec
import numpy as np
import numpy.typing as npt

from policies._capacity import CapacityCore
from policies.common.wording import counted
from policies.model import Assignment, Job, Node, Snapshot


class CapacityError(ValueError):
    """An assignment that the free capacity cannot honour (a policy bug)."""


class FreeCapacity(CapacityCore):
    """Free GPUs (by index), CPUs and memory of every schedulable node."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self._start(_Layout(tuple(nodes)))

    @classmethod
    def for_training(cls, snapshot: Snapshot) -> FreeCapacity:
        """Capacity of the nodes training may use, before any job is counted."""
        capacity = cls.__new__(cls)
        capacity._start(_Layout.for_training(snapshot.nodes))
        return capacity

    def _start(self, layout: _Layout) -> None:
        # Nodes and their order never change during a decision: shared with the layout.
        self._nodes: dict[str, Node] = layout.nodes
        self._order: dict[str, int] = layout.order
        # A node's list of free GPUs is never changed in place, only replaced (`take`,
        # `take_held`, `release`): the layout's lists are shared, not copied.
        self._free: dict[str, list[int]] = layout.free.copy()
        self._cpus: dict[str, float] = layout.cpus.copy()
        self._mem: dict[str, float] = layout.mem.copy()
        self._max_gpus = layout.max_gpus
        self._most_gpu_memory_gb = layout.max_gpu_memory_gb
        self._training_gpus = layout.total_gpus
        self._buckets: list[dict[str, None]] = [b.copy() for b in layout.buckets]
        self._rack_of = layout.rack_of
        # The buckets and free GPUs of each rack, worked out from the buckets when first
        # asked for and kept in step from then on. Only jobs spread over nodes ask, so
        # most decisions never copy or update a rack's buckets (on a large cluster,
        # hundreds of racks of nine buckets each, updated on every take).
        self._by_rack: tuple[dict[str, list[dict[str, None]]], dict[str, int]] | None = None
        self._min_gpu_memory_gb = layout.min_gpu_memory_gb
        self._layout = layout
        # The same free GPUs, CPUs and memory as per-node arrays (snapshot order), kept in
        # step with the dicts: room for a job with CPU or memory needs is then a few
        # vector operations instead of a walk over every node.
        self._free_n = layout.free_n.copy()
        self._cpus_a = layout.cpus_a.copy()
        self._mem_a = layout.mem_a.copy()
        # The same CPUs and memory as integers while every figure is a whole number (CPU
        # counts and GB usually are), kept in step; None once one is not. Room for a job
        # with whole needs then divides them as integers, with no check per query.
        self._cpus_w = None if layout.cpus_w is None else layout.cpus_w.copy()
        self._mem_w = None if layout.mem_w is None else layout.mem_w.copy()
        self.total_free = layout.total_free
        # Room per job shape, an upper bound while capacity only shrinks; cleared on release.
        self._room: dict[int | tuple[int, float, float, float], int] = {}

    # -- queries -----------------------------------------------------------------------------
    def node(self, node_id: str) -> Node:
        return self._nodes[node_id]

    def has_node(self, node_id: str) -> bool:
        """Whether training may use the node."""
        return node_id in self._nodes

    def node_ids(self) -> list[str]:
        """Schedulable node ids in snapshot order."""
        return list(self._nodes)

    def count_with_free(self, gpus: int) -> int:
        """How many nodes have `gpus` or more free GPUs: from the bucket sizes."""
        buckets = self._buckets
        return sum(len(buckets[count]) for count in range(max(gpus, 0), len(buckets)))

    def position(self, node_id: str) -> int:
        return self._order[node_id]

    def free_gpus(self, node_id: str) -> tuple[int, ...]:
        return tuple(self._free.get(node_id, ()))

    def all_free(self, node_id: str, gpu_indices: Iterable[int]) -> bool:
        """Whether every GPU of `gpu_indices` on the node is free (no: a node training
        may not use)."""
        free = self._free.get(node_id)
        return free is not None and all(g in free for g in gpu_indices)

    def free_count(self, node_id: str) -> int:
        return len(self._free.get(node_id, ()))

    def free_cpus(self, node_id: str) -> float:
        return self._cpus[node_id]

    def free_memory_gb(self, node_id: str) -> float:
        return self._mem[node_id]

    @property
    def max_gpus_per_node(self) -> int:
        return self._max_gpus

    def _never_fits_why(self, job: Job) -> str | None:
        """`never_fits`'s words, for a job its compiled check found too large."""
        layout = self._layout
        if job.gpus_per_worker > layout.max_gpus:
            return (
                f"can never fit: a worker needs {counted(job.gpus_per_worker, 'GPU')} and the "
                f"largest node training can use has {layout.max_gpus}"
            )
        if job.gpu_memory_gb > layout.max_gpu_memory_gb:
            return (
                f"can never fit: a worker needs {job.gpu_memory_gb:g} GB per GPU and no node "
                f"training can use has more than {layout.max_gpu_memory_gb:g}"
            )
        smallest = job.lo * job.gpus_per_worker
        if smallest > layout.total_gpus:
            return (
                f"can never fit: needs at least {counted(smallest, 'GPU')} and training can use "
                f"{layout.total_gpus} in all"
            )
        return None

    def nodes_by_free(self, rack: str | None = None) -> list[dict[str, None]]:
        """Nodes by their count of free GPUs (index = count), each in insertion order.

        With `rack`, only the nodes of that rack, in the same relative order. Read only.
        """
        return self._buckets if rack is None else self._racks_kept()[0][rack]

    @property
    def racks_by_node(self) -> Mapping[str, str]:
        """The rack of every schedulable node, by node id. Read only."""
        return self._rack_of

    def rack_of(self, node_id: str) -> str:
        """The rack of a schedulable node (its `topology.rack`)."""
        return self._rack_of[node_id]

    @property
    def free_gpus_by_rack(self) -> Mapping[str, int]:
        """Free GPUs of each rack's nodes, in all, by rack. Read only."""
        return self._racks_kept()[1]

    def rack_free_gpus(self, rack: str) -> int:
        """Free GPUs of a rack's nodes, in all."""
        return self._racks_kept()[1][rack]

    def _racks_kept(self) -> tuple[dict[str, list[dict[str, None]]], dict[str, int]]:
        """Each rack's buckets and free GPUs, derived from the buckets on the first call.

        A rack's buckets are the cluster's buckets filtered to its nodes, in the same
        order: both start in snapshot order, and every move takes a node out of both
        and appends it to the end of both. So filtering the buckets at any time gives
        exactly what keeping per-rack buckets from the start would have.
        """
        by_rack = self._by_rack
        if by_rack is None:
            layout = self._layout
            width = len(self._buckets)
            rack_buckets: dict[str, list[dict[str, None]]] = {
                rack: [{} for _ in range(width)] for rack in layout.rack_order
            }
            rack_free = dict.fromkeys(layout.rack_order, 0)
            rack_of = self._rack_of
            for count, bucket in enumerate(self._buckets):
                for node_id in bucket:
                    rack = rack_of[node_id]
                    rack_buckets[rack][count][node_id] = None
                    rack_free[rack] += count
            by_rack = self._by_rack = (rack_buckets, rack_free)
        return by_rack

    def first_rack_holding(self, gpus_per_worker: int, workers: int, nodes: int) -> str | None:
        """The first rack (by name) whose nodes hold `workers` workers of `gpus_per_worker`
        GPUs on `nodes` nodes or fewer, taken whole and most free GPUs first (as
        :meth:`nodes_needed` counts for the whole cluster); None if no rack does."""
        self._racks_kept()
        return self._first_rack_holding(self._layout.racks, gpus_per_worker, workers, nodes)

    def racks(self) -> list[str]:
        """Racks of the schedulable nodes, by name."""
        return list(self._layout.racks)

    def rack_positions(self) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """The positions (as :meth:`fits` indexes them) of each rack's nodes, one row per
        rack in the order of :meth:`racks`, padded at the end with the position one past
        the last node; and whether each rack has a name (nodes without one are not a
        rack). Read only: one matrix, so that a question about every rack is a few vector
        operations, not a loop over hundreds of racks."""
        layout = self._layout
        return layout.rack_positions, layout.named_racks

    def fits(self, job: Job) -> npt.NDArray[np.int64]:
        """:meth:`workers_fitting` of every node, by position (0 or less: none); a new
        array, the caller's to keep."""
        return self._fits(job)

    def nodes_with_free(self, count: int) -> Iterator[str]:
        """Nodes with exactly `count` free GPUs, in snapshot order of insertion."""
        if 0 <= count <= self._max_gpus:
            yield from self._buckets[count]

    def workers_fitting(self, node_id: str, job: Job) -> int:
        """How many of `job`'s workers this node can take now."""
        node = self._nodes.get(node_id)
        if node is None or node.gpu_memory_gb < job.gpu_memory_gb:
            return 0
        by_gpu = len(self._free[node_id]) // job.gpus_per_worker
        by_cpu = (
            int(self._cpus[node_id] // job.cpus_per_worker) if job.cpus_per_worker > 0 else by_gpu
        )
        by_mem = (
            int(self._mem[node_id] // job.memory_gb_per_worker)
            if job.memory_gb_per_worker > 0
            else by_gpu
        )
        return max(0, min(by_gpu, by_cpu, by_mem))

    def room(self, job: Job) -> int:
        """The workers of `job` that fit now, over all nodes."""
        if self.fits_by_gpus_alone(job):
            return self._room_by_gpus(job.gpus_per_worker)
        fit = self._fits(job)
        return int(fit[fit > 0].sum())

    def _fits(self, job: Job) -> npt.NDArray[np.int64]:
        """:meth:`workers_fitting` of every node at once, by position (0 or less: none).

        Numpy's float floor division is Python's, so every figure is the one
        `workers_fitting` gives; on thousands of nodes this is the difference between
        a walk over every node and a few vector operations.
        """
        fit = self._free_n // job.gpus_per_worker
        cpw, mpw = job.cpus_per_worker, job.memory_gb_per_worker
        if cpw > 0:
            np.minimum(fit, _floor_divided(self._cpus_a, self._cpus_w, cpw), out=fit)
        if mpw > 0:
            np.minimum(fit, _floor_divided(self._mem_a, self._mem_w, mpw), out=fit)
        if job.gpu_memory_gb > self._min_gpu_memory_gb:
            fit[self._layout.short_of_gpu_memory(job.gpu_memory_gb)] = 0
        return fit

    def candidate_nodes(self, job: Job, descending: bool = True) -> list[tuple[str, int]]:
        """(node, workers that fit) for every node that takes at least one worker.

        Ordered by free GPUs (most first when `descending`), then snapshot order.
        Walks the buckets, so nodes with too few free GPUs are never looked at.
        """
        gpw = job.gpus_per_worker
        counts = range(self._max_gpus, gpw - 1, -1)
        if not descending:
            counts = range(gpw, self._max_gpus + 1)
        buckets = self._buckets
        if self.fits_by_gpus_alone(job):
            # Every node of a bucket takes the same workers: no node needs a look.
            return [(node_id, count // gpw) for count in counts for node_id in buckets[count]]
        # The fits, computed at once; the walk only reads them (this is the engine's
        # hottest loop on large clusters).
        fits = self._fits(job).tolist()
        order = self._order
        out: list[tuple[str, int]] = []
        for count in counts:
            for node_id in buckets[count]:
                fit = fits[order[node_id]]
                if fit > 0:
                    out.append((node_id, fit))
        return out

    # -- changes (engine only) ----------------------------------------------------------------
    def _take_checked(self, job: Job, assignments: Sequence[Assignment]) -> None:
        """`take` for assignments its quick checks did not pass: every check, with what is
        wrong in the error, then the commit."""
        self._check(job, assignments)
        for a in assignments:
            free = self._free[a.node_id]
            self._move(a.node_id, len(free), len(free) - len(a.gpu_indices))
            taken = set(a.gpu_indices)
            self._free[a.node_id] = [g for g in free if g not in taken]
            self._spend(a.node_id, len(a.gpu_indices) // job.gpus_per_worker, job, -1)
            self.total_free -= len(a.gpu_indices)

    def _fits_node(self, job: Job, node_id: str, workers: int) -> bool:
        """Whether the node's GPU memory, free CPUs and free memory take `workers` workers.

        Only the GPU memory needs a look for most jobs (no CPU or memory needs), and
        not even that when every node has enough of it.
        """
        if (
            job.gpu_memory_gb > self._min_gpu_memory_gb
            and self._nodes[node_id].gpu_memory_gb < job.gpu_memory_gb
        ):
            return False
        cpus = workers * job.cpus_per_worker
        if cpus > 0 and cpus > self._cpus[node_id] + 1e-9:
            return False
        memory = workers * job.memory_gb_per_worker
        return not (memory > 0 and memory > self._mem[node_id] + 1e-9)

    def _spend(self, node_id: str, workers: int, job: Job, sign: int) -> None:
        """Take (`sign` -1) or give back (+1) the CPUs and memory of `workers` workers."""
        position = self._order[node_id]
        cpus = self._cpus[node_id] + sign * (workers * job.cpus_per_worker)
        memory = self._mem[node_id] + sign * (workers * job.memory_gb_per_worker)
        self._cpus[node_id] = self._cpus_a[position] = cpus
        self._mem[node_id] = self._mem_a[position] = memory
        self._cpus_w = _kept_whole(self._cpus_w, position, cpus)
        self._mem_w = _kept_whole(self._mem_w, position, memory)

    def take_held(self, held: Iterable[tuple[Job, Sequence[Assignment]]]) -> None:
        """Count GPUs running jobs already hold, skipping nodes training may not use.

        All at once, node by node: this runs for every running job of every decision.
        The GPUs are taken by the compiled `_take_held_gpus`; nodes move between buckets
        in the order they first appear in `held`, which is the order placement later
        reads them in. (The engine passes a list; anything else is listed first, since
        it is walked twice.)
        """
        held = held if isinstance(held, list) else list(held)
        self._take_held_gpus(held)
        cpus: dict[str, float] = {}
        mem: dict[str, float] = {}
        nodes = self._nodes
        # Most jobs ask for no CPUs or memory: adding their zeros changes no sum. A node's
        # sums take the jobs in the same order as its GPUs do.
        needs_more = [h for h in held if h[0].cpus_per_worker or h[0].memory_gb_per_worker]
        for job, assignments in needs_more:
            cpw, mpw = job.cpus_per_worker, job.memory_gb_per_worker
            gpw = job.gpus_per_worker
            for a in assignments:
                node_id = a.node_id
                if node_id not in nodes:
                    continue
                if cpw:
                    cpus[node_id] = cpus.get(node_id, 0.0) + len(a.gpu_indices) // gpw * cpw
                if mpw:
                    mem[node_id] = mem.get(node_id, 0.0) + len(a.gpu_indices) // gpw * mpw
        order = self._order
        cpus_a, mem_a = self._cpus_a, self._mem_a
        for node_id, used in cpus.items():
            self._cpus[node_id] -= used
            cpus_a[order[node_id]] = left_cpus = self._cpus[node_id]
            self._cpus_w = _kept_whole(self._cpus_w, order[node_id], left_cpus)
        for node_id, used in mem.items():
            self._mem[node_id] -= used
            mem_a[order[node_id]] = left_mem = self._mem[node_id]
            self._mem_w = _kept_whole(self._mem_w, order[node_id], left_mem)

    def release(self, job: Job, assignments: Sequence[Assignment]) -> None:
        """Give back GPUs a job held (a preemption or a shrink)."""
        self._room.clear()
        for a in assignments:
            if a.node_id not in self._nodes:
                continue
            free = self._free[a.node_id]
            returned = [g for g in a.gpu_indices if g not in free]
            self._move(a.node_id, len(free), len(free) + len(returned))
            self._free[a.node_id] = sorted(free + returned)
            self._spend(a.node_id, len(a.gpu_indices) // job.gpus_per_worker, job, 1)
            self.total_free += len(returned)

    def _check(self, job: Job, assignments: Sequence[Assignment]) -> None:
        seen: set[str] = set()
        for a in assignments:
            if a.node_id in seen:
                raise CapacityError(f"node {a.node_id!r} appears twice in one placement")
            seen.add(a.node_id)
            if a.node_id not in self._nodes:
                raise CapacityError(f"node {a.node_id!r} is not schedulable for training")
            node = self._nodes[a.node_id]
            if len(set(a.gpu_indices)) != len(a.gpu_indices):
                raise CapacityError(f"GPU indices repeat on node {a.node_id!r}")
            free = set(self._free[a.node_id])
            busy = [g for g in a.gpu_indices if g not in free]
            if busy:
                raise CapacityError(f"GPUs {busy} of node {a.node_id!r} are not free")
            if len(a.gpu_indices) % job.gpus_per_worker:
                raise CapacityError(
                    f"{counted(len(a.gpu_indices), 'GPU')} on {a.node_id!r} is not whole workers"
                )
            if node.gpu_memory_gb < job.gpu_memory_gb:
                raise CapacityError(f"node {a.node_id!r} has too little GPU memory")
            workers = len(a.gpu_indices) // job.gpus_per_worker
            # A job that needs no CPUs (or memory) fits even where running jobs overcommit them.
            cpus = workers * job.cpus_per_worker
            if cpus > 0 and cpus > self._cpus[a.node_id] + 1e-9:
                raise CapacityError(f"node {a.node_id!r} has too few free CPUs")
            memory = workers * job.memory_gb_per_worker
            if memory > 0 and memory > self._mem[a.node_id] + 1e-9:
                raise CapacityError(f"node {a.node_id!r} has too little free memory")


class _Layout:
    """A node list's starting capacity, computed once and copied by each decision."""

    __slots__ = (
        "buckets",
        "cpus",
        "cpus_a",
        "cpus_w",
        "free",
        "free_n",
        "gpu_mem_a",
        "max_gpu_memory_gb",
        "max_gpus",
        "mem",
        "mem_a",
        "mem_w",
        "min_gpu_memory_gb",
        "named_racks",
        "nodes",
        "order",
        "rack_of",
        "rack_order",
        "rack_positions",
        "racks",
        "short_of",
        "total_free",
        "total_gpus",
    )

    # The training layouts of the last few node lists seen, keyed by the identities of
    # their nodes (the nodes are kept, so those ids stay theirs): a caller that sends
    # the same Node objects round after round, as the simulator does, pays for the
    # layout once. A service decodes new nodes for each request, usually equal to the
    # last request's: the same layouts are also kept by the nodes' MessagePack encoding,
    # which costs a fraction of building a layout and, unlike comparing the nodes, tells
    # apart every value that could change what a decision says: a float is its eight
    # bytes (-0.0 is not 0.0), an int is not a float. Not their JSON, which formats every
    # float in decimal: by timeit on the large example's 512 nodes, 83 µs to encode and
    # hash them as MessagePack against 158 µs as JSON (docs/benchmarks.md, "Each decision
    # timed on a snapshot of its own"), and a layout costs 0.35 ms.
    # Layouts never change (`short_of_gpu_memory` only remembers answers).
    _recent: ClassVar[dict[tuple[int, ...], tuple[tuple[Node, ...], _Layout]]] = {}
    _recent_by_bytes: ClassVar[dict[bytes, _Layout]] = {}
    _recent_lock: ClassVar[threading.Lock] = threading.Lock()
    _KEEP: ClassVar[int] = 4

    def __init__(self, nodes: tuple[Node, ...]) -> None:
        self.nodes: dict[str, Node] = {}
        self.order: dict[str, int] = {}
        self.free: dict[str, list[int]] = {}
        self.cpus: dict[str, float] = {}
        self.mem: dict[str, float] = {}
        self.max_gpus = 0
        for position, node in enumerate(nodes):
            self.nodes[node.id] = node
            self.order[node.id] = position
            self.free[node.id] = list(range(node.gpus))
            self.cpus[node.id] = float(node.cpus)
            self.mem[node.id] = float(node.memory_gb)
            self.max_gpus = max(self.max_gpus, node.gpus)
        self.buckets: list[dict[str, None]] = [{} for _ in range(self.max_gpus + 1)]
        self.rack_of: dict[str, str] = {}
        # Racks in the order of their first nodes (the order a decision's per-rack
        # tallies list them in), as the keys of a dict.
        self.rack_order: dict[str, None] = {}
        for node_id, free in self.free.items():
            self.buckets[len(free)][node_id] = None
            rack = self.nodes[node_id].topology.rack
            self.rack_of[node_id] = rack
            self.rack_order[rack] = None
        self.free_n: npt.NDArray[np.int64] = np.array(
            [len(f) for f in self.free.values()], dtype=np.int64
        )
        self.cpus_a: npt.NDArray[np.float64] = np.array(list(self.cpus.values()), dtype=np.float64)
        self.mem_a: npt.NDArray[np.float64] = np.array(list(self.mem.values()), dtype=np.float64)
        self.gpu_mem_a: npt.NDArray[np.float64] = np.array(
            [n.gpu_memory_gb for n in self.nodes.values()], dtype=np.float64
        )
        self.cpus_w = _whole(self.cpus_a)
        self.mem_w = _whole(self.mem_a)
        # Per GPU-memory need, the nodes with less (see short_of_gpu_memory).
        self.short_of: dict[float, npt.NDArray[np.bool_]] = {}
        self.racks = tuple(sorted(self.rack_order))
        positions: dict[str, list[int]] = {rack: [] for rack in self.racks}
        for node_id, position in self.order.items():
            positions[self.rack_of[node_id]].append(position)
        width = max((len(members) for members in positions.values()), default=0)
        self.rack_positions: npt.NDArray[np.int64] = np.full(
            (len(self.racks), width), len(self.order), dtype=np.int64
        )
        for row, rack in enumerate(self.racks):
            members = positions[rack]
            self.rack_positions[row, : len(members)] = members
        self.named_racks = np.array([bool(rack) for rack in self.racks], dtype=np.bool_)
        self.total_free = sum(len(f) for f in self.free.values())
        self.total_gpus = self.total_free
        self.min_gpu_memory_gb = min((n.gpu_memory_gb for n in self.nodes.values()), default=0.0)
        self.max_gpu_memory_gb = max((n.gpu_memory_gb for n in self.nodes.values()), default=0.0)

    _SHORT_KEPT: ClassVar[int] = 64

    def short_of_gpu_memory(self, need_gb: float) -> npt.NDArray[np.bool_]:
        """Which nodes, by position, have less GPU memory than `need_gb` (not to be changed).

        Kept per need: a layout outlives the decision that built it, and a snapshot's jobs
        ask for a handful of sizes, each room query on a large cluster otherwise comparing
        every node again. A few sizes are kept; past that, a need is compared afresh.
        """
        short = self.short_of.get(need_gb)
        if short is None:
            short = self.gpu_mem_a < need_gb
            if len(self.short_of) < self._SHORT_KEPT:
                self.short_of[need_gb] = short
        return short

    @classmethod
    def for_training(cls, nodes: tuple[Node, ...]) -> _Layout:
        key = tuple(map(id, nodes))
        with cls._recent_lock:
            hit = cls._recent.get(key)
        if hit is not None:
            return hit[1]
        as_bytes = msgspec.msgpack.encode(nodes)
        with cls._recent_lock:
            layout = cls._recent_by_bytes.get(as_bytes)
        if layout is None:
            layout = cls(tuple(n for n in nodes if n.schedulable_for_training))
        with cls._recent_lock:
            _keep(cls._recent, key, (nodes, layout), cls._KEEP)
            _keep(cls._recent_by_bytes, as_bytes, layout, cls._KEEP)
        return layout


_K = TypeVar("_K")
_V = TypeVar("_V")


def _keep(recent: dict[_K, _V], key: _K, value: _V, most: int) -> None:
    """Remember `value` under `key`, forgetting the oldest entry past `most` entries."""
    recent.pop(key, None)
    if len(recent) >= most:
        del recent[next(iter(recent))]
    recent[key] = value


def _floor_divided(
    amounts: npt.NDArray[np.float64], whole: npt.NDArray[np.int64] | None, per_worker: float
) -> npt.NDArray[np.int64]:
    """`amounts // per_worker` for every node, as integers (Python's float floor division).

    `whole` is `amounts` as integers when every figure is a whole number (CPU counts and
    GB usually are), else None. Then a whole `per_worker` divides them as integers: the
    same quotients, exactly, at a fraction of the cost of numpy's float floor division,
    which a room query on a large cluster would otherwise spend most of its time in.
    """
    if whole is not None and float(per_worker).is_integer():
        return whole // int(per_worker)
    return (amounts // per_worker).astype(np.int64)


def _whole(amounts: npt.NDArray[np.float64]) -> npt.NDArray[np.int64] | None:
    """`amounts` as integers if every figure is a whole number an integer holds, else None."""
    whole = amounts.astype(np.int64)
    # Back to floats to compare: a figure too large for an integer does not survive.
    return whole if (whole.astype(np.float64) == amounts).all() else None


def _kept_whole(
    whole: npt.NDArray[np.int64] | None, position: int, amount: float
) -> npt.NDArray[np.int64] | None:
    """`whole` with `amount` at `position`, or None if there is no `whole` any more or
    `amount` is not a whole number that an integer holds (the figures are then divided
    as floats from then on)."""
    if whole is not None and float(amount).is_integer() and -(2**63) <= amount < 2**63:
        whole[position] = int(amount)
        return whole
    return None


def assignments_for(
    capacity: FreeCapacity, job: Job, workers_by_node: Sequence[tuple[str, int]]
) -> tuple[Assignment, ...]:
    """Turn (node, worker count) picks into GPU-index assignments, lowest free indices first."""
    out = []
    for node_id, workers in workers_by_node:
        if workers <= 0:
            continue
        gpus = capacity.lowest_free_gpus(node_id, workers * job.gpus_per_worker)
        out.append(Assignment(node_id=node_id, gpu_indices=gpus))
    return tuple(out)


def not_enough_room(job: Job, workers: int, room: int) -> str:
    """The reason a placement gives when the nodes that suit `job` hold only `room` workers."""
    return (
        f"needs {counted(workers, 'worker')} of {counted(job.gpus_per_worker, 'GPU')}; the "
        f"nodes that meet its GPU-memory, CPU and memory needs have room for {room}"
    )
