# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The per-job part of a decision's free capacity, compiled.

:class:`policies.capacity.FreeCapacity` is the account of the free capacity and holds
most of its queries; this module holds, as a base class of it, what the engine asks for
every job: committing a placement (quick checks, then the node moved between the
buckets of free-GPU counts), taking the GPUs of running jobs, a node's lowest free
GPUs, the best fit by GPU count (found, or found and taken in one call), the room for
a job of a given shape, how many nodes a spread job needs and the first rack that holds
it on that many, and whether a waiting job can never fit. They are the same dict and
list operations the Python did, in the same order, without the interpreter's dispatch:
every answer and every bucket's order is the one the Python gave (the golden decisions,
tests/policies/test_placement.py and tests/policies/test_capacity_compiled.py judge
it).
"""

from cpython.dict cimport PyDict_GetItem
from cpython.ref cimport PyObject

from policies.model import Assignment

cdef extern from *:
    const char* CAPACITY_SOURCE_SHA256  # defined by the build (setup.py)

SOURCE_SHA256 = CAPACITY_SOURCE_SHA256.decode("ascii")
"""SHA-256 of the source this module was built from."""


cdef class CapacityCore:
    """Free GPUs by node and the buckets of nodes by free-GPU count; see FreeCapacity."""

    # Set by FreeCapacity._start; the meaning of each is told there.
    cdef public dict _free
    cdef public list _buckets
    cdef public object _by_rack
    cdef public dict _order
    cdef public dict _rack_of
    cdef public dict _nodes
    cdef public dict _room
    cdef public double _min_gpu_memory_gb
    cdef public Py_ssize_t total_free
    cdef public Py_ssize_t _max_gpus
    # What training may use in all, whole (not what is free): with `_max_gpus`, the
    # layout's most GPU memory and GPUs in all, read by never_fits for every waiting job.
    cdef public double _most_gpu_memory_gb
    cdef public Py_ssize_t _training_gpus
    cdef object _free_n_array
    cdef long long[::1] _free_n_view

    @property
    def _free_n(self):
        """Free GPUs per node, by position (an int64 array kept in step with `_free`)."""
        return self._free_n_array

    @_free_n.setter
    def _free_n(self, value):
        self._free_n_view = value
        self._free_n_array = value

    def lowest_free_gpus(self, node_id, Py_ssize_t count):
        """The `count` lowest free GPU indices of a node (fewer if it has fewer)."""
        cdef PyObject* found = PyDict_GetItem(self._free, node_id)
        if found is NULL:
            return ()
        return tuple((<list>found)[:count])

    def fits_by_gpus_alone(self, job):
        """Whether the workers of `job` a node takes depend on its free GPUs alone.

        True when the job needs no CPUs or host memory per worker and every node has
        enough GPU memory for it: then a node with `c` free GPUs takes
        `c // gpus_per_worker` workers, and questions about room are answered from the
        bucket sizes without looking at single nodes.
        """
        return self._gpus_alone(
            job.cpus_per_worker, job.memory_gb_per_worker, job.gpu_memory_gb
        )

    cdef bint _gpus_alone(self, object cpus, object memory, object gpu_memory) except -1:
        return cpus <= 0 and memory <= 0 and gpu_memory <= self._min_gpu_memory_gb

    def never_fits(self, job):
        """Why `job` could not run at its smallest size even on an empty cluster, or None.

        Judged against the nodes training may use, whole (not what is free now): a
        worker larger than every node, or more GPUs than training has in all. Asked for
        every job that waits; the words come from FreeCapacity._never_fits_why.
        """
        gpus_per_worker = job.gpus_per_worker
        if (
            gpus_per_worker > self._max_gpus
            or job.gpu_memory_gb > self._most_gpu_memory_gb
            or job.lo * gpus_per_worker > self._training_gpus
        ):
            return self._never_fits_why(job)
        return None

    def first_fullest(self, Py_ssize_t need):
        """The first node (in bucket order) of the fewest free GPUs that are `need` or
        more, or None: the best fit of a job any node with room takes."""
        return self._first_fullest(need)

    cdef object _first_fullest(self, Py_ssize_t need):
        cdef list buckets = self._buckets
        cdef Py_ssize_t count
        if need < 0:
            need = 0
        for count in range(need, len(buckets)):
            bucket = <dict>buckets[count]
            if bucket:
                return next(iter(bucket))
        return None

    def nodes_needed(self, Py_ssize_t gpus_per_worker, Py_ssize_t workers):
        """How many nodes hold `workers` workers of `gpus_per_worker` GPUs when taken
        whole, most free GPUs first (the fewest that can), by free GPUs alone; None if
        all of them together never do."""
        cdef Py_ssize_t nodes = _needed_in(self._buckets, gpus_per_worker, workers)
        return None if nodes < 0 else nodes

    def _first_rack_holding(
        self, racks, Py_ssize_t gpus_per_worker, Py_ssize_t workers, Py_ssize_t nodes
    ):
        """The first of `racks` (named) whose nodes hold the workers on `nodes` nodes or
        fewer, as nodes_needed counts; None if none does. The racks' buckets must have
        been derived (FreeCapacity._racks_kept)."""
        cdef dict rack_buckets = <dict>self._by_rack[0]
        cdef dict rack_free = <dict>self._by_rack[1]
        cdef Py_ssize_t need = gpus_per_worker * workers, count
        for rack in racks:
            # A rack with fewer free GPUs than the job needs cannot hold it: no walk of
            # its buckets (most racks of a busy cluster).
            if not rack or <Py_ssize_t>rack_free[rack] < need:
                continue
            count = _needed_in(<list>rack_buckets[rack], gpus_per_worker, workers)
            if 0 <= count <= nodes:
                return rack
        return None

    def fullest_fit(self, job, Py_ssize_t need):
        """Where the best fit by GPU count puts `need` GPUs of `job` on one node: the
        lowest free GPUs of the first node (in bucket order) of the fewest free GPUs that
        are `need` or more, as a one-assignment tuple. None when the job does not fit by
        its GPUs alone (fits_by_gpus_alone) or no node has `need` free."""
        return self._fullest_fit(job, need, False)

    def take_fullest_fit(self, job, Py_ssize_t need):
        """:meth:`fullest_fit`, taken: the engine's commit of a placement whose policy
        places such jobs there (policies.protocols.policy_fits_fullest)."""
        return self._fullest_fit(job, need, True)

    cdef object _fullest_fit(self, object job, Py_ssize_t need, bint take):
        cdef list free
        if need <= 0 or not self._gpus_alone(
            job.cpus_per_worker, job.memory_gb_per_worker, job.gpu_memory_gb
        ):
            return None
        node_id = self._first_fullest(need)
        if node_id is None:
            return None
        free = <list>self._free[node_id]
        fit = (Assignment(node_id=node_id, gpu_indices=tuple(free[:need])),)
        if take:
            self._take_lowest(node_id, free, need)
        return fit

    def _room_by_gpus(self, Py_ssize_t gpus_per_worker):
        """Workers of `gpus_per_worker` GPUs that fit now, over all nodes, for a job that
        fits by its GPUs alone: from the bucket sizes."""
        cdef list buckets = self._buckets
        cdef Py_ssize_t count, room = 0
        for count in range(gpus_per_worker, self._max_gpus + 1):
            room += len(<dict>buckets[count]) * (count // gpus_per_worker)
        return room

    def room_at_most(self, job):
        """An upper bound on the workers of `job` that fit now, over all nodes.

        Exact when computed, then cached per job shape until GPUs are released: taking
        GPUs only lowers the true value, so the cached one stays an upper bound. The
        engine uses it to skip placement calls that cannot succeed, which is most of
        them on a busy cluster with thousands of pending jobs.
        """
        gpus_per_worker = job.gpus_per_worker
        cpus = job.cpus_per_worker
        memory = job.memory_gb_per_worker
        gpu_memory = job.gpu_memory_gb
        if self._gpus_alone(cpus, memory, gpu_memory):
            # Fits by its GPUs alone (most jobs): the room depends on the GPUs per
            # worker alone, a key that needs no tuple.
            shape = gpus_per_worker
        else:
            shape = (gpus_per_worker, cpus, memory, gpu_memory)
        cdef PyObject* found = PyDict_GetItem(self._room, shape)
        if found is not NULL:
            return <object>found
        room = self.room(job)
        self._room[shape] = room
        return room

    def _move(self, node_id, Py_ssize_t old, Py_ssize_t new):
        """A node's free-GPU count went from `old` to `new`: move it between buckets (to
        the end of its new bucket, as a dict's insertion would), in its rack's too."""
        self._moved(node_id, old, new)

    cdef int _moved(self, object node_id, Py_ssize_t old, Py_ssize_t new) except -1:
        cdef list in_rack
        if old == new:
            return 0
        self._free_n_view[<Py_ssize_t>self._order[node_id]] = new
        del (<dict>self._buckets[old])[node_id]
        (<dict>self._buckets[new])[node_id] = None
        by_rack = self._by_rack
        if by_rack is not None:
            rack = self._rack_of[node_id]
            in_rack = <list>((<dict>by_rack[0])[rack])
            del (<dict>in_rack[old])[node_id]
            (<dict>in_rack[new])[node_id] = None
            (<dict>by_rack[1])[rack] += new - old
        return 0

    cdef bint _prefix_of(self, list free, object indices) except -1:
        """Whether `indices` are the first entries of `free` (the node's lowest free
        GPUs), as ``tuple(free[:len(indices)]) == indices`` says."""
        cdef Py_ssize_t i, count = len(indices)
        if len(free) < count:
            return False
        for i in range(count):
            if not (free[i] == indices[i]):
                return False
        return True

    cdef bint _on_lowest_free(self, object job, object assignments) except -1:
        """Whether `assignments` are whole workers on the lowest free GPUs of distinct
        nodes that take them, as placements built with `assignments_for` are: the checks
        of FreeCapacity._check, done cheaply. False sends the assignments through the
        full check, which says what is wrong."""
        cdef Py_ssize_t n = len(assignments), count, gpus_per_worker
        cdef PyObject* found
        if n > 1 and len({a.node_id for a in assignments}) < n:
            return False
        gpus_per_worker = job.gpus_per_worker
        by_gpus_alone = self.fits_by_gpus_alone(job)
        for a in assignments:
            node_id = a.node_id
            indices = a.gpu_indices
            found = PyDict_GetItem(self._free, node_id)
            count = len(indices)
            if found is NULL or count % gpus_per_worker:
                return False
            if not self._prefix_of(<list>found, indices):
                return False
            if not by_gpus_alone and not self._fits_node(job, node_id, count // gpus_per_worker):
                return False
        return True

    def _take_held_gpus(self, list held):
        """Take the GPUs of `held` ((job, assignments) of running jobs), skipping nodes
        training may not use: each node's GPUs gathered in `held` order, then each node
        moved once, in the order it first appears."""
        cdef dict taken = {}
        cdef dict nodes = self._nodes
        cdef dict free_of = self._free
        cdef list gpus, free, left
        cdef PyObject* found
        cdef Py_ssize_t old, new, total = self.total_free
        for _, assignments in held:
            for a in assignments:
                node_id = a.node_id
                found = PyDict_GetItem(taken, node_id)
                if found is not NULL:
                    (<list>found).extend(a.gpu_indices)
                elif node_id in nodes:
                    taken[node_id] = list(a.gpu_indices)
        for node_id, value in taken.items():
            gpus = <list>value
            free = <list>free_of[node_id]
            if gpus == free:
                # The jobs hold every free GPU, listed in order: a node one job fills, or
                # several in index order (most, on a busy cluster). No set needed.
                left = []
            else:
                busy = set(gpus)
                if len(busy) >= len(free) and busy.issuperset(free):
                    left = []  # a node its jobs fill, listed out of order
                else:
                    left = [g for g in free if g not in busy]
            free_of[node_id] = left
            old = len(free)
            new = len(left)
            if old != new:
                total -= old - new
                self._moved(node_id, old, new)
        self.total_free = total

    cdef int _take_lowest(self, object node_id, list free, Py_ssize_t count) except -1:
        """Take the node's `count` lowest free GPUs (`free`, its list)."""
        cdef Py_ssize_t have = len(free)
        self._moved(node_id, have, have - count)
        self._free[node_id] = free[count:]
        self.total_free -= count
        return 0

    def take(self, job, assignments):
        """Commit `assignments` of `job`; raises CapacityError if any is not free."""
        cdef Py_ssize_t count, gpus_per_worker
        cdef PyObject* found
        needs_more = job.cpus_per_worker or job.memory_gb_per_worker
        if len(assignments) == 1 and not needs_more:
            # Most placements: one node, on its lowest free GPUs, of a job that needs no
            # CPUs or memory.
            a = assignments[0]
            node_id = a.node_id
            indices = a.gpu_indices
            found = PyDict_GetItem(self._free, node_id)
            count = len(indices)
            if (
                found is not NULL
                and not count % <Py_ssize_t>job.gpus_per_worker
                and self._prefix_of(<list>found, indices)
                and (
                    job.gpu_memory_gb <= self._min_gpu_memory_gb
                    or self._nodes[node_id].gpu_memory_gb >= job.gpu_memory_gb
                )
            ):
                self._take_lowest(node_id, <list>found, count)
                return
        if self._on_lowest_free(job, assignments):
            gpus_per_worker = job.gpus_per_worker
            for a in assignments:
                node_id = a.node_id
                count = len(a.gpu_indices)
                self._take_lowest(node_id, <list>self._free[node_id], count)
                if needs_more:
                    self._spend(node_id, count // gpus_per_worker, job, -1)
            return
        self._take_checked(job, assignments)


cdef Py_ssize_t _needed_in(list buckets, Py_ssize_t gpw, Py_ssize_t workers) except -2:
    """Nodes of `buckets` (nodes by free-GPU count) that the greedy takes for `workers`
    workers of `gpw` GPUs: whole nodes, most free GPUs first; -1 if they never hold them."""
    cdef Py_ssize_t left = workers, used = 0, count, size, fit, whole
    for count in range(len(buckets) - 1, gpw - 1, -1):
        size = len(<dict>buckets[count])
        if not size:
            continue
        fit = count // gpw
        whole = (left + fit - 1) // fit  # nodes of this size that would cover what is left
        if whole <= size:
            return used + whole
        used += size
        left -= size * fit
    return -1
