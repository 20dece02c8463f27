"""What returning loaned servers does to the training jobs on them.

Every reclaim policy only *chooses* servers; this module works out the rest the
same way for all of them, so their answers differ in the choice alone and can
be compared fairly (Aryl, Li et al. 2022, states the problem this way: pick the
servers to return so that the fewest jobs are preempted).

- A running job with workers on a returned server keeps the workers it has on
  other nodes. If a worker count it accepts (bounds and step rule) fits in
  them, it shrinks to the largest such count; only when none does is it
  preempted. An elastic job whose extra workers sat on the returned server thus
  merely shrinks, and a job already preempted for one server costs nothing more
  when another of its servers goes too.
- Cost: one per preempted job. Aryl's objective is the number of preemptions,
  and the snapshot says nothing that would price one job's restart above
  another's (no checkpoint times); the GPUs the preempted jobs held are reported
  beside it (`preempted_gpus`) and break ties. Shrinking costs nothing here: the
  job keeps running, and the cost of rescaling it is the same whichever of its
  servers goes.
- Which GPUs a shrunk job keeps: when its step rule makes it drop more workers
  than the returned servers held, it drops them first from other loaned servers
  (which a later reclaim may want back), then from the nodes holding the fewest
  of its workers, so what stays is as consolidated as it was.

:class:`ReclaimLedger` keeps the tally incrementally as servers are picked one
at a time, so a greedy policy can ask what each remaining server would cost
*now*, after its earlier picks.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from policies.common.wording import counted
from policies.model import Assignment, Job, JobState, Snapshot
from policies.reclaim_models import ReclaimReasons, ReclaimResult, ShrinkEntry


@dataclass(frozen=True)
class ServerImpact:
    """What returning one server would do, given the servers returned before it."""

    node_id: str
    preempts: tuple[str, ...]  # jobs this server newly forces out
    preempted_gpus: int  # GPUs those jobs hold, on every node
    non_preemptible: int  # how many of them are marked non-preemptible
    shrinks: tuple[str, ...]  # jobs that lose workers here but run on
    shrunk_gpus: int  # GPUs those jobs lose on this server
    freed: tuple[str, ...]  # jobs on it already preempted by earlier picks

    @property
    def cost(self) -> float:
        """The server preemption cost: jobs it would newly preempt."""
        return float(len(self.preempts))

    def describe(self) -> str:
        if not (self.preempts or self.shrinks or self.freed):
            return "cost 0: no training work on it"
        parts = [f"cost {self.cost:g}"]
        if self.preempts:
            parts.append(
                f"preempts {_listed(self.preempts)} ({counted(self.preempted_gpus, 'GPU')})"
            )
        if self.shrinks:
            parts.append(f"shrinks {_listed(self.shrinks)} by {counted(self.shrunk_gpus, 'GPU')}")
        if self.freed:
            parts.append(f"{_listed(self.freed)} already preempted by an earlier pick")
        return "; ".join(parts)


class ReclaimLedger:
    """The loaned servers of a snapshot and, as servers are returned, what happens to jobs."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot
        self.loaned: list[str] = [n.id for n in snapshot.nodes if n.loaned]
        self._position = {node_id: i for i, node_id in enumerate(self.loaned)}
        # Workers each running job has on each loaned server.
        self._hosted: dict[str, dict[str, int]] = {node_id: {} for node_id in self.loaned}
        self._workers_left: dict[str, int] = {}
        self._fewest: dict[str, int] = {}
        for job in snapshot.jobs:
            if job.state is not JobState.RUNNING:
                continue
            for a in job.placement:
                hosted = self._hosted.get(a.node_id)
                if hosted is None:
                    continue
                hosted[job.id] = hosted.get(job.id, 0) + len(a.gpu_indices) // job.gpus_per_worker
                self._workers_left[job.id] = job.placed_workers
                self._fewest[job.id] = job.allowed_worker_counts()[0]
        self.preempted: dict[str, None] = {}  # insertion-ordered set
        self.returned: list[str] = []

    def position(self, node_id: str) -> int:
        """The server's place among the loaned servers, in snapshot order."""
        return self._position[node_id]

    def hosted_jobs(self, node_id: str) -> int:
        return len(self._hosted[node_id])

    def busy_gpus(self, node_id: str) -> int:
        jobs = self.snapshot.jobs_by_id
        return sum(w * jobs[j].gpus_per_worker for j, w in self._hosted[node_id].items())

    def impact(self, node_id: str) -> ServerImpact:
        """What returning `node_id` next would do; changes nothing."""
        jobs = self.snapshot.jobs_by_id
        preempts: list[str] = []
        shrinks: list[str] = []
        freed: list[str] = []
        preempted_gpus = non_preemptible = shrunk_gpus = 0
        for job_id, workers in self._hosted[node_id].items():
            job = jobs[job_id]
            if job_id in self.preempted:
                freed.append(job_id)
            elif self._workers_left[job_id] - workers < self._fewest[job_id]:
                preempts.append(job_id)
                preempted_gpus += job.placed_gpus
                non_preemptible += not job.preemptible
            else:
                shrinks.append(job_id)
                shrunk_gpus += workers * job.gpus_per_worker
        return ServerImpact(
            node_id=node_id,
            preempts=tuple(preempts),
            preempted_gpus=preempted_gpus,
            non_preemptible=non_preemptible,
            shrinks=tuple(shrinks),
            shrunk_gpus=shrunk_gpus,
            freed=tuple(freed),
        )

    def give_back(self, node_id: str) -> ServerImpact:
        """Return `node_id`: record its impact and update every job on it."""
        impact = self.impact(node_id)
        for job_id, workers in self._hosted[node_id].items():
            self._workers_left[job_id] -= workers
        for job_id in impact.preempts:
            self.preempted[job_id] = None
        self.returned.append(node_id)
        return impact

    def result(self, server_reasons: dict[str, str], shortfall: str | None = None) -> ReclaimResult:
        """The answer for the servers returned so far, with a reason for every server and job."""
        returned = set(self.returned)
        shrink: list[ShrinkEntry] = []
        preempt: list[str] = []
        job_reasons: dict[str, str] = {}
        preempted_gpus = 0
        for job in self.snapshot.jobs:
            if job.id not in self._workers_left:
                continue
            lost_on = [a.node_id for a in job.placement if a.node_id in returned]
            if not lost_on:
                continue
            lost = (
                sum(len(a.gpu_indices) for a in job.placement if a.node_id in returned)
                // job.gpus_per_worker
            )
            left = job.placed_workers - lost
            verb = "was" if lost == 1 else "were"
            where = (
                f"{lost} of its {counted(job.placed_workers, 'worker')} {verb} on "
                f"{_servers(lost_on)}"
            )
            target = largest_accepted(job, left)
            if target is None:
                preempt.append(job.id)
                preempted_gpus += job.placed_gpus
                note = (
                    ""
                    if job.preemptible
                    else "; it is marked non-preemptible, but inference takes its servers "
                    "back regardless"
                )
                kept = f"keeps {left}" if left else "keeps none"
                job_reasons[job.id] = (
                    f"preempted: {where}; it {kept} and needs at least {self._fewest[job.id]}{note}"
                )
                continue
            shrink.append(
                ShrinkEntry(job_id=job.id, workers=target, assignments=kept_gpus(self, job, target))
            )
            extra = (
                f"; {left - target} more dropped for its {job.scaling_rule.value} step rule"
                if target < left
                else ""
            )
            job_reasons[job.id] = (
                f"shrinks from {job.placed_workers} to {counted(target, 'worker')}: {where}{extra}"
            )
        return ReclaimResult(
            servers=tuple(self.returned),
            shrink=tuple(shrink),
            preempt=tuple(preempt),
            cost=float(len(preempt)),
            preempted_gpus=preempted_gpus,
            reasons=ReclaimReasons(servers=dict(server_reasons), jobs=job_reasons),
            shortfall=shortfall,
        )

    def is_loaned(self, node_id: str) -> bool:
        return node_id in self._position


def largest_accepted(job: Job, workers: int) -> int | None:
    """The largest worker count `job` accepts that is at most `workers`, if any."""
    counts = job.allowed_worker_counts()
    at = bisect_right(counts, workers)
    return counts[at - 1] if at else None


def kept_gpus(ledger: ReclaimLedger, job: Job, workers: int) -> tuple[Assignment, ...]:
    """`workers` workers of `job`'s GPUs off the returned servers (see the module docstring)."""
    returned = set(ledger.returned)
    by_node: dict[str, list[int]] = {}
    for a in job.placement:
        if a.node_id not in returned:
            by_node.setdefault(a.node_id, []).extend(a.gpu_indices)
    order = {node_id: i for i, node_id in enumerate(by_node)}
    # Keep training-pool nodes first, then the nodes with most of the job's GPUs.
    preferred = sorted(by_node, key=lambda n: (ledger.is_loaned(n), -len(by_node[n]), order[n]))
    left = workers * job.gpus_per_worker
    kept: dict[str, tuple[int, ...]] = {}
    for node_id in preferred:
        if left == 0:
            break
        take = min(left, len(by_node[node_id]))
        kept[node_id] = tuple(by_node[node_id][:take])
        left -= take
    # Report them in the job's own node order, as its placement lists them.
    return tuple(Assignment(node_id=n, gpu_indices=kept[n]) for n in by_node if n in kept)


def reclaim_named(snapshot: Snapshot, node_ids: Sequence[str]) -> ReclaimResult:
    """The answer when the caller names the servers: only the consequences are left to say."""
    ledger = ReclaimLedger(snapshot)
    reasons = {}
    for node_id in node_ids:
        impact = ledger.give_back(node_id)
        reasons[node_id] = f"named by the caller; {impact.describe()}"
    return ledger.result(reasons)


def shortfall(count: int, loaned: int) -> str | None:
    """Why fewer servers than asked for are returned, or None when enough are loaned."""
    if count <= loaned:
        return None
    return (
        f"asked for {counted(count, 'server')} but only {loaned} are loaned: all of them are "
        "returned"
    )


def _listed(ids: Iterable[str], limit: int = 5) -> str:
    names = list(ids)
    shown = ", ".join(repr(i) for i in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _servers(node_ids: Sequence[str]) -> str:
    unique = list(dict.fromkeys(node_ids))
    return f"returned server{'s' if len(unique) > 1 else ''} {_listed(unique)}"
