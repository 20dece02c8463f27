"""Volcano's extender plugin: the session becomes a snapshot, each verb is answered from its plan.

Volcano opens a scheduling session every second or so and, with the `extender`
plugin configured, posts the whole session to `onSessionOpen`. Arbiter turns it into
a snapshot (:func:`app.adapters.volcano.session_snapshot`), asks the engine once and
keeps the plan in the cache (`volcano:{cluster_id}:session`) until `onSessionClose`.
The per-task verbs read that plan:

* `jobEnqueueable`: the profile's admission (OASiS's for `oasis`): Permit when it
  admits the job this round, Reject when it defers or rejects it.
* `predicate`: a node passes when the plan puts one of the job's workers on it.
* `prioritize`: 0-100 by how many of the job's workers the plan puts on the node.
* `preemptable`: the evictees whose jobs the profile preempts for the plan.
* `reclaimable`: for evictees on loaned servers, those on the server the profile's
  reclaim policy returns at least cost (Aryl's for `aryl`); elsewhere as preemptable.
* `queueOverused`: the queue holds more GPUs than its weight's share of training.
* `jobReady`: the job has as many tasks allocated as the plan gives it workers.

With no session open (Arbiter restarted mid-session), verbs abstain or pass rather
than block: Volcano's other plugins decide until the next session opens.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import msgspec

from app.adapters.k8s import Plan, PlannedJob, WireError, decode_wire, plan_jobs
from app.adapters.volcano import (
    ABSTAIN,
    PERMIT,
    REJECT,
    UNSCHEDULABLE,
    EnqueueResponse,
    EvictionRequest,
    EvictionResponse,
    JobRequest,
    OnSessionOpenRequest,
    PredicateRequest,
    PredicateResponse,
    PrioritizeRequest,
    PrioritizeResponse,
    QueueOverusedRequest,
    QueueOverusedResponse,
    ReadyResponse,
    TaskInfo,
    decode_task,
    job_id,
    session_snapshot,
)
from app.errors import ApiError, InvalidRequestError
from app.services.decisions import DecisionService, check_snapshot
from app.services.reclaim import ReclaimService
from policies.model import Problem, Snapshot
from policies.reclaim_models import ReclaimRequest
from storage.cache import Cache

logger = logging.getLogger(__name__)
T = TypeVar("T")

MAX_NODE_SCORE = 100
"""Volcano's node scores run to 100, as the Kubernetes framework's do."""


class Session(msgspec.Struct, kw_only=True):
    snapshot: Snapshot
    plan: Plan
    admitted: dict[str, bool] = msgspec.field(default_factory=dict)


def session_key(cluster_id: str) -> str:
    return f"volcano:{cluster_id}:session"


class VolcanoExtender:
    def __init__(  # noqa: PLR0917 - the lifespan's one call site names them all
        self,
        decisions: DecisionService,
        reclaim: ReclaimService,
        cache: Cache,
        profile: str,
        session_ttl_s: float = 600.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.decisions = decisions
        self.reclaim = reclaim
        self.cache = cache
        self.profile = profile
        self.session_ttl_s = session_ttl_s
        self.clock = clock
        self._lock = threading.Lock()

    # -- session ----------------------------------------------------------------------------

    def on_session_open(self, cluster_id: str, body: bytes) -> bytes:
        request = self._decode(body, OnSessionOpenRequest)
        try:
            snapshot = session_snapshot(cluster_id, self.clock(), request)
        except WireError as error:
            raise _invalid(error) from error
        check_snapshot(snapshot)
        decision, _ = self.decisions.decide_snapshot(self.profile, snapshot, endpoint="volcano")
        plan = Plan(
            decision_id=decision.decision_id,
            profile=self.profile,
            at=snapshot.now,
            generation=0,
            jobs=plan_jobs(
                {entry.job_id: entry.assignments for entry in decision.placement},
                {e.job_id: (e.status.value, e.reason) for e in decision.explanations},
                {job.id: job.gpus_per_worker for job in snapshot.jobs},
            ),
            preempt={note.job_id: note.reason for note in decision.preemptions},
        )
        admitted = {entry.job_id: entry.admitted for entry in decision.admission}
        session = Session(snapshot=snapshot, plan=plan, admitted=admitted)
        self.cache.set(
            session_key(cluster_id), msgspec.json.encode(session), ttl_s=self.session_ttl_s
        )
        return b"{}"

    def on_session_close(self, cluster_id: str, body: bytes) -> bytes:
        self.cache.delete(session_key(cluster_id))
        return b"{}"

    # -- per-task verbs ---------------------------------------------------------------------

    def predicate(self, cluster_id: str, body: bytes) -> bytes:
        request = self._decode(body, PredicateRequest)
        planned = self._planned(cluster_id, request.task)
        answer = PredicateResponse()
        if planned is not None:
            on = {slot.node_id for slot in planned.slots}
            if request.node.name not in on:
                where = ", ".join(sorted(on)) if on else f"nowhere: {planned.reason}"
                answer = PredicateResponse(
                    status=f"the plan runs job {job_id(request.task)!r} on {where}",
                    code=UNSCHEDULABLE,
                )
        return msgspec.json.encode(answer)

    def prioritize(self, cluster_id: str, body: bytes) -> bytes:
        request = self._decode(body, PrioritizeRequest)
        names = [node.name for node in request.nodes or []]
        scores = dict.fromkeys(names, 0.0)
        planned = self._planned(cluster_id, request.task)
        if planned is not None and planned.slots:
            per_node: dict[str, int] = {}
            for slot in planned.slots:
                per_node[slot.node_id] = per_node.get(slot.node_id, 0) + 1
            most = max(per_node.values())
            for name in names:
                scores[name] = MAX_NODE_SCORE * per_node.get(name, 0) / most
        return msgspec.json.encode(PrioritizeResponse(node_score=scores))

    def preemptable(self, cluster_id: str, body: bytes) -> bytes:
        request = self._decode(body, EvictionRequest)
        session = self._session(cluster_id)
        if session is None or request.evictor is None:
            return msgspec.json.encode(EvictionResponse(status=ABSTAIN))
        evictees = self._evictees(request)
        victims = [raw for raw, task in evictees if job_id(task) in session.plan.preempt]
        status = PERMIT if victims else REJECT
        return msgspec.json.encode(EvictionResponse(status=status, victims=victims))

    def reclaimable(self, cluster_id: str, body: bytes) -> bytes:
        request = self._decode(body, EvictionRequest)
        session = self._session(cluster_id)
        if session is None or request.evictor is None:
            return msgspec.json.encode(EvictionResponse(status=ABSTAIN))
        evictees = self._evictees(request)
        snapshot = session.snapshot
        loaned = {node.id for node in snapshot.nodes if node.loaned}
        on_loan = sorted({task.node_name for _, task in evictees if task.node_name in loaned})
        if not on_loan:
            victims = [raw for raw, task in evictees if job_id(task) in session.plan.preempt]
        else:
            # The loaned server whose return costs least, and the tasks that return stops.
            best: tuple[float, str, set[str]] | None = None
            for node in on_loan:
                answer, _ = self.reclaim.reclaim_snapshot(
                    self.profile, snapshot, ReclaimRequest(node_ids=(node,))
                )
                stopped = {e.job_id for e in answer.shrink} | set(answer.preempt)
                if best is None or answer.cost < best[0]:
                    best = (answer.cost, node, stopped)
            assert best is not None
            _, node, stopped = best
            victims = [
                raw for raw, task in evictees if task.node_name == node and job_id(task) in stopped
            ]
        status = PERMIT if victims else REJECT
        return msgspec.json.encode(EvictionResponse(status=status, victims=victims))

    def job_enqueueable(self, cluster_id: str, body: bytes) -> bytes:
        request = self._decode(body, JobRequest)
        session = self._session(cluster_id)
        status = ABSTAIN
        if session is not None and request.job is not None:
            admitted = session.admitted.get(request.job.uid)
            if admitted is not None:
                status = PERMIT if admitted else REJECT
        return msgspec.json.encode(EnqueueResponse(status=status))

    def job_ready(self, cluster_id: str, body: bytes) -> bytes:
        request = self._decode(body, JobRequest)
        session = self._session(cluster_id)
        ready = True
        if session is not None and request.job is not None:
            planned = session.plan.jobs.get(request.job.uid)
            if planned is not None and planned.slots:
                tasks = (request.job.tasks or {}).values()
                allocated = sum(1 for t in tasks if t.gpus() > 0 and t.holds)
                ready = allocated >= len(planned.slots)
        return msgspec.json.encode(ReadyResponse(status=ready))

    def queue_overused(self, cluster_id: str, body: bytes) -> bytes:
        request = self._decode(body, QueueOverusedRequest)
        session = self._session(cluster_id)
        overused = False
        if session is not None and request.queue is not None:
            snapshot = session.snapshot
            weights = {t.id: t.weight for t in snapshot.tenants}
            name = request.queue.name or request.queue.uid
            total = sum(weights.values()) or 1.0
            share = snapshot.training_gpus() * weights.get(name, 0.0) / total
            held = sum(j.placed_gpus for j in snapshot.jobs if j.tenant == name)
            overused = held > share
        return msgspec.json.encode(QueueOverusedResponse(overused=overused))

    # -- helpers ----------------------------------------------------------------------------

    def _decode(self, body: bytes, kind: type[T]) -> T:
        try:
            return decode_wire(body, kind)
        except WireError as error:
            raise _invalid(error) from error

    def _session(self, cluster_id: str) -> Session | None:
        raw = self.cache.get(session_key(cluster_id))
        if raw is None:
            return None
        try:
            return msgspec.json.decode(raw, type=Session)
        except msgspec.MsgspecError:
            logger.warning("unreadable Volcano session of cluster %r; ignored", cluster_id)
            return None

    def _planned(self, cluster_id: str, task: TaskInfo) -> PlannedJob | None:
        if task.gpus() == 0:
            return None
        session = self._session(cluster_id)
        if session is None:
            return None
        return session.plan.jobs.get(job_id(task))

    @staticmethod
    def _evictees(request: EvictionRequest) -> list[tuple[msgspec.Raw, TaskInfo]]:
        try:
            return [
                (raw, decode_task(raw, f"evictees[{i}]"))
                for i, raw in enumerate(request.evictees or [])
            ]
        except WireError as error:  # an evictee that is not a task: the caller's fault
            raise _invalid(error) from error


def _invalid(error: WireError | ApiError) -> InvalidRequestError:
    path = error.path if isinstance(error, WireError) else "body"
    return InvalidRequestError(str(error), [Problem(path=path, message=str(error))])
