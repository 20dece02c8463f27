"""Free capacity of a cluster during one decision.

The engine owns one :class:`FreeCapacity` per decision: it starts from the
snapshot (GPUs held by running jobs are taken), and every placement the engine
accepts is committed to it. Placement policies only *read* it through the
queries below and return assignments; the engine checks and commits them, so a
policy can never give a GPU twice.

Nodes are bucketed by their count of free GPUs, so "the fullest node that still
fits g GPUs" costs O(max GPUs per node), not O(nodes): decisions stay cheap on
snapshots with hundreds of nodes and thousands of jobs.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

from policies.model import Assignment, Job, Node, Snapshot


class CapacityError(ValueError):
    """An assignment that the free capacity cannot honour (a policy bug)."""


class FreeCapacity:
    """Free GPUs (by index), CPUs and memory of every schedulable node."""

    def __init__(self, nodes: Iterable[Node]) -> None:
        self._nodes: dict[str, Node] = {}
        self._order: dict[str, int] = {}
        self._free: dict[str, list[int]] = {}
        self._cpus: dict[str, float] = {}
        self._mem: dict[str, float] = {}
        self._max_gpus = 0
        for position, node in enumerate(nodes):
            self._nodes[node.id] = node
            self._order[node.id] = position
            self._free[node.id] = list(range(node.gpus))
            self._cpus[node.id] = float(node.cpus)
            self._mem[node.id] = float(node.memory_gb)
            self._max_gpus = max(self._max_gpus, node.gpus)
        self._buckets: list[dict[str, None]] = [{} for _ in range(self._max_gpus + 1)]
        for node_id, free in self._free.items():
            self._buckets[len(free)][node_id] = None
        self.total_free = sum(len(f) for f in self._free.values())
        # Room per job shape, an upper bound while capacity only shrinks; cleared on release.
        self._room: dict[tuple[int, float, float, float], int] = {}

    @classmethod
    def for_training(cls, snapshot: Snapshot) -> FreeCapacity:
        """Capacity of the nodes training may use, before any job is counted."""
        return cls(n for n in snapshot.nodes if n.schedulable_for_training)

    # -- queries -----------------------------------------------------------------------------
    def node(self, node_id: str) -> Node:
        return self._nodes[node_id]

    def node_ids(self) -> list[str]:
        """Schedulable node ids in snapshot order."""
        return list(self._nodes)

    def position(self, node_id: str) -> int:
        return self._order[node_id]

    def free_gpus(self, node_id: str) -> tuple[int, ...]:
        return tuple(self._free.get(node_id, ()))

    def free_count(self, node_id: str) -> int:
        return len(self._free.get(node_id, ()))

    def free_cpus(self, node_id: str) -> float:
        return self._cpus[node_id]

    def free_memory_gb(self, node_id: str) -> float:
        return self._mem[node_id]

    @property
    def max_gpus_per_node(self) -> int:
        return self._max_gpus

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

    def room_at_most(self, job: Job) -> int:
        """An upper bound on the workers of `job` that fit now, over all nodes.

        Exact when computed, then cached per job shape until GPUs are released: taking
        GPUs only lowers the true value, so the cached one stays an upper bound. The
        engine uses it to skip placement calls that cannot succeed, which is most of
        them on a busy cluster with thousands of pending jobs.
        """
        shape = (
            job.gpus_per_worker,
            job.cpus_per_worker,
            job.memory_gb_per_worker,
            job.gpu_memory_gb,
        )
        room = self._room.get(shape)
        if room is None:
            room = sum(fit for _, fit in self.candidate_nodes(job))
            self._room[shape] = room
        return room

    def candidate_nodes(self, job: Job, descending: bool = True) -> list[tuple[str, int]]:
        """(node, workers that fit) for every node that takes at least one worker.

        Ordered by free GPUs (most first when `descending`), then snapshot order.
        Walks the buckets, so nodes with too few free GPUs are never looked at.
        """
        out: list[tuple[str, int]] = []
        gpw = job.gpus_per_worker
        counts = range(self._max_gpus, gpw - 1, -1)
        if not descending:
            counts = range(gpw, self._max_gpus + 1)
        # The body of workers_fitting, hoisted: this loop is the engine's hottest.
        cpw, mpw, gpu_mem = job.cpus_per_worker, job.memory_gb_per_worker, job.gpu_memory_gb
        nodes, cpus, mem = self._nodes, self._cpus, self._mem
        for count in counts:
            by_gpu = count // gpw
            for node_id in self._buckets[count]:
                if nodes[node_id].gpu_memory_gb < gpu_mem:
                    continue
                fit = by_gpu
                if cpw > 0:
                    fit = min(fit, int(cpus[node_id] // cpw))
                if mpw > 0:
                    fit = min(fit, int(mem[node_id] // mpw))
                if fit > 0:
                    out.append((node_id, fit))
        return out

    # -- changes (engine only) ----------------------------------------------------------------
    def take(self, job: Job, assignments: Sequence[Assignment]) -> None:
        """Commit `assignments` of `job`; raises CapacityError if any is not free."""
        self._check(job, assignments)
        for a in assignments:
            free = self._free[a.node_id]
            self._move(a.node_id, len(free), len(free) - len(a.gpu_indices))
            taken = set(a.gpu_indices)
            self._free[a.node_id] = [g for g in free if g not in taken]
            workers = len(a.gpu_indices) // job.gpus_per_worker
            self._cpus[a.node_id] -= workers * job.cpus_per_worker
            self._mem[a.node_id] -= workers * job.memory_gb_per_worker
            self.total_free -= len(a.gpu_indices)

    def take_held(self, job: Job, assignments: Sequence[Assignment]) -> None:
        """Count GPUs a running job already holds, skipping nodes training may not use."""
        kept = [a for a in assignments if a.node_id in self._nodes]
        for a in kept:
            free = self._free[a.node_id]
            taken = set(a.gpu_indices) & set(free)
            self._move(a.node_id, len(free), len(free) - len(taken))
            self._free[a.node_id] = [g for g in free if g not in taken]
            workers = len(a.gpu_indices) // job.gpus_per_worker
            self._cpus[a.node_id] -= workers * job.cpus_per_worker
            self._mem[a.node_id] -= workers * job.memory_gb_per_worker
            self.total_free -= len(taken)

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
            workers = len(a.gpu_indices) // job.gpus_per_worker
            self._cpus[a.node_id] += workers * job.cpus_per_worker
            self._mem[a.node_id] += workers * job.memory_gb_per_worker
            self.total_free += len(returned)

    def _move(self, node_id: str, old: int, new: int) -> None:
        if old != new:
            del self._buckets[old][node_id]
            self._buckets[new][node_id] = None

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
                    f"{len(a.gpu_indices)} GPUs on {a.node_id!r} is not whole workers"
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


def assignments_for(
    capacity: FreeCapacity, job: Job, workers_by_node: Sequence[tuple[str, int]]
) -> tuple[Assignment, ...]:
    """Turn (node, worker count) picks into GPU-index assignments, lowest free indices first."""
    out = []
    for node_id, workers in workers_by_node:
        if workers <= 0:
            continue
        gpus = capacity.free_gpus(node_id)[: workers * job.gpus_per_worker]
        out.append(Assignment(node_id=node_id, gpu_indices=gpus))
    return tuple(out)


def not_enough_room(job: Job, workers: int, room: int) -> str:
    """The reason a placement gives when the nodes that suit `job` hold only `room` workers."""
    return (
        f"needs {workers} workers of {job.gpus_per_worker} GPUs; the nodes that meet its "
        f"GPU-memory, CPU and memory needs have room for {room}"
    )
