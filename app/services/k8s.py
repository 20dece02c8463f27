"""The Kubernetes scheduler extender: one plan per scheduling round, each pod answered from it.

kube-scheduler asks about one pod at a time (filter, prioritize, then bind, or
preempt when nothing fits); Arbiter decides for jobs, gangs included. This service
bridges the two. It keeps, per cluster, what it has seen (nodes, pods waiting, pods
bound, the GPUs each job's plan reserved) in the cache under `k8s:{cluster_id}:view`
(Redis, or in process), builds a job-level snapshot from it
(:func:`app.adapters.k8s.build_snapshot`), asks the engine once per round and keeps
the plan beside the view. A round ends when the view changes in a way the plan did not
see (a new job or node, a binding off the plan, something expired) or after
`ARBITER_K8S_ROUND_S`; within it, every pod of a planned job is answered from the
same plan, so the pods of a gang land on the slots the engine gave the gang, all of
them or none.

Verbs that carry an `Error` field (filter, bind) report every problem there with a
200, as the scheduler expects; prioritize and preempt have none, so a payload they
cannot read is a 422 in the service's one error shape (the scheduler treats any
status but 200 as the extender's error).

One cluster's calls are handled one at a time in a process (kube-scheduler sends
them one at a time anyway); two replicas serving one cluster's scheduler would race
on the view (the later write wins), so point one scheduler at one replica, or at a
load balancer with session affinity.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Protocol

import msgspec

from app.adapters.k8s import (
    MAX_SCORE,
    Binding,
    ClusterView,
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderPreemptionArgs,
    ExtenderPreemptionResult,
    HostPriority,
    KubeNode,
    MetaPod,
    MetaVictims,
    NodeList,
    Plan,
    Pod,
    PodInfo,
    SeenNode,
    SeenPod,
    WireError,
    build_snapshot,
    decode_node,
    decode_wire,
    node_of,
    plan_jobs,
    pod_info,
)
from app.errors import ApiError, InvalidRequestError
from app.services.decisions import DecisionService, check_snapshot
from app.services.reclaim import ReclaimService
from policies.common.wording import counted
from policies.model import Assignment, Node, Pool, Problem
from policies.reclaim_models import ReclaimRequest
from storage.cache import Cache

logger = logging.getLogger(__name__)


class Binder(Protocol):
    """Binds a pod to a node through the Kubernetes API; raises when that fails."""

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...


@dataclass(frozen=True)
class ExtenderOptions:
    """How the extender decides and keeps its view (the `ARBITER_K8S_*` settings)."""

    profile: str = "fifo-backfill"
    view_ttl_s: float = 300.0
    bound_ttl_s: float = 86_400.0
    round_s: float = 5.0


def view_key(cluster_id: str) -> str:
    return f"k8s:{cluster_id}:view"


class KubeExtender:
    """The four extender verbs, for any number of clusters (one view each)."""

    def __init__(  # noqa: PLR0917 - the lifespan's one call site names them all
        self,
        decisions: DecisionService,
        reclaim: ReclaimService,
        cache: Cache,
        options: ExtenderOptions | None = None,
        binder: Binder | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.decisions = decisions
        self.reclaim = reclaim
        self.cache = cache
        self.options = options or ExtenderOptions()
        self.binder = binder
        self.clock = clock
        self._locks: dict[str, threading.Lock] = {}
        self._locks_lock = threading.Lock()

    # -- the verbs --------------------------------------------------------------------------

    def filter(self, cluster_id: str, body: bytes) -> bytes:
        """ExtenderArgs → ExtenderFilterResult; every problem goes to its `Error`."""
        try:
            args = decode_wire(body, ExtenderArgs)
            with self._lock(cluster_id):
                result = self._filter(cluster_id, args)
        except (WireError, ApiError) as error:
            result = ExtenderFilterResult(error=_message(error))
        return msgspec.json.encode(result)

    def prioritize(self, cluster_id: str, body: bytes) -> bytes:
        """ExtenderArgs → HostPriorityList (0–10); an unreadable payload is a 422."""
        try:
            args = decode_wire(body, ExtenderArgs)
            with self._lock(cluster_id):
                scores = self._prioritize(cluster_id, args)
        except WireError as error:
            raise _invalid(error) from error
        return msgspec.json.encode(scores)

    def bind(self, cluster_id: str, body: bytes) -> bytes:
        """ExtenderBindingArgs → ExtenderBindingResult; every problem goes to its `Error`."""
        try:
            args = decode_wire(body, ExtenderBindingArgs)
            with self._lock(cluster_id):
                error = self._bind(cluster_id, args)
        except (WireError, ApiError) as failure:
            error = _message(failure)
        return msgspec.json.encode(ExtenderBindingResult(error=error))

    def preempt(self, cluster_id: str, body: bytes) -> bytes:
        """ExtenderPreemptionArgs → ExtenderPreemptionResult; unreadable payloads are 422."""
        try:
            args = decode_wire(body, ExtenderPreemptionArgs)
            with self._lock(cluster_id):
                result = self._preempt(cluster_id, args)
        except WireError as error:
            raise _invalid(error) from error
        return msgspec.json.encode(result)

    def see_nodes(self, cluster_id: str, body: bytes) -> int:
        """A NodeList pushed by the cluster (for `nodeCacheCapable: true`); nodes taken."""
        try:
            listed = decode_wire(body, NodeList)
            with self._lock(cluster_id):
                view = self._load(cluster_id)
                nodes = self._nodes_of(listed, "items")
                self._see_nodes(view, [node for node, _ in nodes])
                self._save(cluster_id, view)
        except WireError as error:
            raise _invalid(error) from error
        return len(nodes)

    def release_job(self, cluster_id: str, job_id: str) -> bool:
        """Forget a finished job's pods and GPUs (a `job_finished` feedback event)."""
        with self._lock(cluster_id):
            view = self._load(cluster_id)
            pods = [uid for uid, b in view.bound.items() if b.pod.job_id == job_id]
            pods += [uid for uid, p in view.pods.items() if p.pod.job_id == job_id]
            if not pods and job_id not in view.reservations:
                return False
            for uid in pods:
                view.bound.pop(uid, None)
                view.pods.pop(uid, None)
            view.reservations.pop(job_id, None)
            view.generation += 1
            self._save(cluster_id, view)
            return True

    # -- filter and prioritize --------------------------------------------------------------

    def _filter(self, cluster_id: str, args: ExtenderArgs) -> ExtenderFilterResult:
        pod, names, raw = self._arguments(args)
        view = self._load(cluster_id)
        if raw is not None:
            self._see_nodes(view, [node for node, _ in raw])
        info = pod_info(pod)
        self._see_pod(view, info)
        passed, failed, unresolvable = self._judge(cluster_id, view, info, names)
        self._save(cluster_id, view)
        if raw is None:
            return ExtenderFilterResult(
                node_names=passed,
                failed_nodes=failed,
                failed_and_unresolvable_nodes=unresolvable,
            )
        kept = set(passed)
        return ExtenderFilterResult(
            nodes={"items": [item for node, item in raw if node.id in kept]},
            failed_nodes=failed,
            failed_and_unresolvable_nodes=unresolvable,
        )

    def _prioritize(self, cluster_id: str, args: ExtenderArgs) -> list[HostPriority]:
        pod, names, raw = self._arguments(args)
        view = self._load(cluster_id)
        if raw is not None:
            self._see_nodes(view, [node for node, _ in raw])
        info = pod_info(pod)
        self._see_pod(view, info)
        scores = dict.fromkeys(names, 0)
        if info.gpus > 0 and not info.inference:
            try:
                plan = self._plan(cluster_id, view, info.job_id)
            except ApiError as error:
                # No plan, no preference: neutral scores, and the reason in the log.
                logger.warning("k8s prioritize for %s: %s", info.key, _message(error))
                plan = None
            if plan is not None:
                free = self._free_slots(view, plan, info)
                per_node: dict[str, int] = {}
                for slot in free:
                    per_node[slot.node_id] = per_node.get(slot.node_id, 0) + 1
                most = max(per_node.values(), default=1)
                for name in names:
                    if name in per_node:
                        # The node of the pod's next slot scores highest; the job's other
                        # nodes less, by how many of its slots they hold.
                        scores[name] = max(1, (MAX_SCORE - 1) * per_node[name] // most)
                if free and free[0].node_id in scores:
                    scores[free[0].node_id] = MAX_SCORE
        self._save(cluster_id, view)
        return [HostPriority(host=name, score=score) for name, score in scores.items()]

    def _judge(
        self, cluster_id: str, view: ClusterView, info: PodInfo, names: list[str]
    ) -> tuple[list[str], dict[str, str], dict[str, str]]:
        """Nodes passed, failed (with reasons) and failed for good, for one pod."""
        if info.gpus == 0:
            # Not a pod with GPUs: Arbiter has no say over where it goes.
            return list(names), {}, {}
        if info.inference:
            return _serving_nodes(view, info, names)
        plan = self._plan(cluster_id, view, info.job_id)
        planned = plan.jobs.get(info.job_id)
        slots = self._free_slots(view, plan, info)
        on_plan = {slot.node_id for slot in slots}
        if planned is None:
            reason = f"job {info.job_id!r} is not in Arbiter's plan"
        elif planned.slots and not slots:
            reason = (
                f"every slot of job {info.job_id!r} ({counted(len(planned.slots), 'pod')}) is "
                "taken: "
                f"pod {info.key} is surplus to the plan"
            )
        elif planned.slots:
            reason = f"the plan runs job {info.job_id!r} on {', '.join(sorted(on_plan))}"
        else:
            reason = f"job {info.job_id!r} {planned.status}: {planned.reason}"
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        for name in names:
            seen = view.nodes.get(name)
            if name in on_plan:
                passed.append(name)
            elif seen is None:
                failed[name] = (
                    f"node {name!r} is unknown to Arbiter (send it with nodeCacheCapable: "
                    "false, or POST the NodeList to the extender's nodes endpoint)"
                )
            elif (why := _never_fits(seen.node, info)) is not None:
                unresolvable[name] = why
            elif planned is not None and planned.status == "rejected":
                unresolvable[name] = reason
            else:
                failed[name] = reason
        return passed, failed, unresolvable

    # -- bind -------------------------------------------------------------------------------

    def _bind(self, cluster_id: str, args: ExtenderBindingArgs) -> str:
        if not args.pod_uid or not args.node:
            return "ExtenderBindingArgs needs PodUID and Node"
        view = self._load(cluster_id)
        already = view.bound.get(args.pod_uid)
        if already is not None:
            if already.node == args.node:
                return ""  # a retried bind: done already
            return f"pod {already.pod.key} is already bound to {already.node!r}, not {args.node!r}"
        seen = view.pods.get(args.pod_uid)
        if seen is None:
            return (
                f"pod {args.pod_namespace}/{args.pod_name} (uid {args.pod_uid}) is unknown to "
                "Arbiter (never filtered here, or its record expired): not bound; the "
                "scheduler will try it again"
            )
        info = seen.pod
        if args.node not in view.nodes:
            return f"node {args.node!r} is unknown to Arbiter: not bound"
        indices = self._claim(cluster_id, view, info, args.node)
        if indices is None:
            return (
                f"node {args.node!r} has fewer than {counted(info.gpus, 'free GPU')} in "
                "Arbiter's view: "
                f"pod {info.key} not bound"
            )
        if self.binder is not None:
            try:
                self.binder.bind(info.namespace, info.name, info.uid, args.node)
            except Exception as error:
                return f"the Kubernetes API refused the binding of {info.key}: {error}"
        del view.pods[info.uid]
        view.bound[info.uid] = Binding(
            pod=info, node=args.node, gpu_indices=indices, at=self.clock()
        )
        self._save(cluster_id, view)
        return ""

    def _claim(
        self, cluster_id: str, view: ClusterView, info: PodInfo, node: str
    ) -> tuple[int, ...] | None:
        """GPU indices for the pod on `node`: a slot of its job's plan, else free ones there."""
        if info.gpus == 0:
            return ()
        if info.inference:
            return self._free_on(view, node, info.gpus)
        plan = self._plan(cluster_id, view, info.job_id)
        planned = plan.jobs.get(info.job_id)
        planned_slots = planned.slots if planned is not None else ()
        reserved = view.reservations.get(info.job_id)
        if reserved is None:
            _stop_preempted(view, plan, planned_slots)
            reserved = ()
        held = view.held_gpus()
        # The job's reservation first, then slots the plan adds (a job the plan grows).
        growth = tuple(
            slot
            for slot in planned_slots
            if not held.get(slot.node_id, set()) & set(slot.gpu_indices)
        )
        if not reserved:
            reserved, growth = growth, ()
        view.reservations[info.job_id] = reserved
        taken = _taken(view, info.job_id)
        for slot in (*reserved, *growth):
            if slot.node_id == node and slot.gpu_indices not in taken.get(node, ()):
                if slot not in reserved:
                    view.reservations[info.job_id] = (*reserved, slot)
                return slot.gpu_indices
        # Off the plan (the scheduler chose another node): the job gives up one slot no
        # pod of it holds yet, if any, and takes free GPUs on the chosen node instead;
        # the next round plans with that.
        untaken = [s for s in reserved if s.gpu_indices not in taken.get(s.node_id, ())]
        kept = tuple(s for s in reserved if s is not untaken[-1]) if untaken else reserved
        view.reservations[info.job_id] = kept
        indices = self._free_on(view, node, info.gpus)
        if indices is None:
            view.reservations[info.job_id] = reserved
            if not reserved:
                del view.reservations[info.job_id]
            return None
        view.reservations[info.job_id] = (*kept, Assignment(node_id=node, gpu_indices=indices))
        view.generation += 1
        return indices

    def _free_on(self, view: ClusterView, node: str, gpus: int) -> tuple[int, ...] | None:
        seen = view.nodes.get(node)
        if seen is None:
            return None
        held = view.held_gpus().get(node, set())
        free = [g for g in range(seen.node.gpus) if g not in held]
        return tuple(free[:gpus]) if len(free) >= gpus else None

    # -- preempt ----------------------------------------------------------------------------

    def _preempt(self, cluster_id: str, args: ExtenderPreemptionArgs) -> ExtenderPreemptionResult:
        proposed: dict[str, tuple[list[str], int]] = {}
        for name, victims in (args.node_name_to_victims or {}).items():
            pods = (victims.pods or []) if victims else []
            count = victims.num_pdb_violations if victims else 0
            proposed[name] = ([p.metadata.uid for p in pods], count)
        for name, meta in (args.node_name_to_meta_victims or {}).items():
            pods_meta = (meta.pods or []) if meta else []
            count = meta.num_pdb_violations if meta else 0
            proposed[name] = ([p.uid for p in pods_meta], count)
        view = self._load(cluster_id)
        info = pod_info(args.pod)
        self._see_pod(view, info)
        if info.gpus == 0:
            answer = {name: _victims(uids, n) for name, (uids, n) in proposed.items()}
        elif info.inference:
            answer = self._reclaim_victims(cluster_id, view, proposed)
        else:
            answer = self._plan_victims(cluster_id, view, info, proposed)
        self._save(cluster_id, view)
        return ExtenderPreemptionResult(node_name_to_meta_victims=answer)

    def _plan_victims(
        self,
        cluster_id: str,
        view: ClusterView,
        info: PodInfo,
        proposed: dict[str, tuple[list[str], int]],
    ) -> dict[str, MetaVictims]:
        """Nodes where the plan puts the pod, with the pods of the jobs the profile preempts.

        Pods Arbiter does not manage stay among the victims the scheduler proposed (it
        needs them gone for CPU or memory); Arbiter's pods are victims only when the
        profile's own preemption stops their job.
        """
        plan = self._plan(cluster_id, view, info.job_id)
        on_plan = {slot.node_id for slot in self._free_slots(view, plan, info)}
        answer: dict[str, MetaVictims] = {}
        for name, (uids, violations) in proposed.items():
            if name not in on_plan:
                continue
            victims = [uid for uid in uids if uid not in view.bound]
            victims += [
                uid
                for uid, binding in view.bound.items()
                if binding.node == name and binding.pod.job_id in plan.preempt
            ]
            answer[name] = _victims(victims, violations)
        return answer

    def _reclaim_victims(
        self, cluster_id: str, view: ClusterView, proposed: dict[str, tuple[list[str], int]]
    ) -> dict[str, MetaVictims]:
        """A serving pod on loaned servers: each one's cost by the profile's reclaim policy
        (Aryl's least preemption cost for `aryl`); only the cheapest loaned ones are kept."""
        snapshot = build_snapshot(cluster_id, self.clock(), view)
        check_snapshot(snapshot)
        loaned = {node.id for node in snapshot.nodes if node.loaned}
        costs: dict[str, tuple[float, list[str], int]] = {}
        answer: dict[str, MetaVictims] = {}
        for name, (uids, violations) in proposed.items():
            seen = view.nodes.get(name)
            if seen is not None and seen.node.pool is Pool.TRAINING:
                continue  # a serving pod does not go to a training node
            if name not in loaned:
                answer[name] = _victims(uids, violations)
                continue
            decision, _ = self.reclaim.reclaim_snapshot(
                self.options.profile, snapshot, ReclaimRequest(node_ids=(name,))
            )
            stopped = {entry.job_id for entry in decision.shrink} | set(decision.preempt)
            victims = [uid for uid in uids if uid not in view.bound]
            victims += [
                uid
                for uid, binding in view.bound.items()
                if binding.node == name and binding.pod.job_id in stopped
            ]
            costs[name] = (decision.cost, victims, violations)
        if costs:
            cheapest = min(cost for cost, _, _ in costs.values())
            for name, (cost, victims, violations) in costs.items():
                if cost <= cheapest:
                    answer[name] = _victims(victims, violations)
        return answer

    # -- the view and the plan --------------------------------------------------------------

    def _arguments(
        self, args: ExtenderArgs
    ) -> tuple[Pod, list[str], list[tuple[Node, msgspec.Raw]] | None]:
        if args.nodes is not None:
            raw = self._nodes_of(args.nodes, "Nodes.items")
            return args.pod, [node.id for node, _ in raw], raw
        if args.node_names is not None:
            return args.pod, list(args.node_names), None
        raise WireError("ExtenderArgs needs Nodes (nodeCacheCapable: false) or NodeNames")

    @staticmethod
    def _nodes_of(listed: NodeList, at: str) -> list[tuple[Node, msgspec.Raw]]:
        nodes: list[tuple[Node, msgspec.Raw]] = []
        for i, item in enumerate(listed.items or []):
            kube: KubeNode = decode_node(item, f"{at}[{i}]")
            nodes.append((node_of(kube), item))
        return nodes

    def _lock(self, cluster_id: str) -> threading.Lock:
        with self._locks_lock:
            lock = self._locks.get(cluster_id)
            if lock is None:
                lock = self._locks[cluster_id] = threading.Lock()
            return lock

    def _load(self, cluster_id: str) -> ClusterView:
        raw = self.cache.get(view_key(cluster_id))
        view = ClusterView()
        if raw is not None:
            try:
                view = msgspec.json.decode(raw, type=ClusterView)
            except msgspec.MsgspecError:
                logger.warning("unreadable k8s view of cluster %r; starting afresh", cluster_id)
        self._expire(view)
        return view

    def _save(self, cluster_id: str, view: ClusterView) -> None:
        ttl = max(self.options.view_ttl_s, self.options.bound_ttl_s)
        self.cache.set(view_key(cluster_id), msgspec.json.encode(view), ttl_s=ttl)

    def _expire(self, view: ClusterView) -> None:
        now = self.clock()
        changed = False
        for uid, binding in list(view.bound.items()):
            if now - binding.at > self.options.bound_ttl_s:
                del view.bound[uid]
                changed = True
        for uid, pod in list(view.pods.items()):
            if now - pod.seen > self.options.view_ttl_s:
                del view.pods[uid]
                changed = True
        jobs_bound = {b.pod.job_id for b in view.bound.values()}
        for job_id in list(view.reservations):
            if job_id not in jobs_bound:
                del view.reservations[job_id]
                changed = True
        needed = {slot.node_id for slots in view.reservations.values() for slot in slots}
        needed |= {b.node for b in view.bound.values()}
        for name, node in list(view.nodes.items()):
            if now - node.seen > self.options.view_ttl_s and name not in needed:
                del view.nodes[name]
                changed = True
        if changed:
            view.generation += 1

    def _see_nodes(self, view: ClusterView, nodes: Iterable[Node]) -> None:
        now = self.clock()
        for node in nodes:
            before = view.nodes.get(node.id)
            if before is None or before.node != node:
                view.generation += 1
            view.nodes[node.id] = SeenNode(node=node, seen=now)

    def _see_pod(self, view: ClusterView, info: PodInfo) -> None:
        if info.uid in view.bound:
            return
        if info.gpus > 0 and not info.inference and not view.job_pods(info.job_id):
            view.generation += 1  # a job the plan has not seen
        view.pods[info.uid] = SeenPod(pod=info, seen=self.clock())

    def _plan(self, cluster_id: str, view: ClusterView, job_id: str) -> Plan:
        """This round's plan: the one kept, while still current and holding the job."""
        now = self.clock()
        plan = view.plan
        if (
            plan is not None
            and plan.generation == view.generation
            and plan.profile == self.options.profile
            and now - plan.at < self.options.round_s
            and job_id in plan.jobs
        ):
            return plan
        snapshot = build_snapshot(cluster_id, now, view)
        check_snapshot(snapshot)
        decision, _ = self.decisions.decide_snapshot(self.options.profile, snapshot, endpoint="k8s")
        gpus_per_worker = {job.id: job.gpus_per_worker for job in snapshot.jobs}
        plan = Plan(
            decision_id=decision.decision_id,
            profile=self.options.profile,
            at=now,
            generation=view.generation,
            jobs=plan_jobs(
                {entry.job_id: entry.assignments for entry in decision.placement},
                {e.job_id: (e.status.value, e.reason) for e in decision.explanations},
                gpus_per_worker,
            ),
            preempt={note.job_id: note.reason for note in decision.preemptions},
        )
        view.plan = plan
        return plan

    def _free_slots(self, view: ClusterView, plan: Plan, info: PodInfo) -> list[Assignment]:
        """The slots of the pod's job not taken by another of its pods (its own first)."""
        bound = view.bound.get(info.uid)
        if bound is not None:
            return [Assignment(node_id=bound.node, gpu_indices=bound.gpu_indices)]
        reserved = view.reservations.get(info.job_id, ())
        planned = plan.jobs.get(info.job_id)
        # A running job's planned placement holds its reservation, plus any growth.
        slots = planned.slots if planned is not None and planned.slots else reserved
        taken = _taken(view, info.job_id)
        return [slot for slot in slots if slot.gpu_indices not in taken.get(slot.node_id, ())]


def _stop_preempted(view: ClusterView, plan: Plan, slots: Iterable[Assignment]) -> None:
    """Forget the jobs the plan preempts whose GPUs the slots take: the scheduler evicted
    their pods (the preempt verb named them) before binding a pod in their place."""
    wanted: dict[str, set[int]] = {}
    for slot in slots:
        wanted.setdefault(slot.node_id, set()).update(slot.gpu_indices)
    for job_id in plan.preempt:
        held = view.reservations.get(job_id, ())
        if any(wanted.get(s.node_id, set()) & set(s.gpu_indices) for s in held):
            view.reservations.pop(job_id, None)
            for uid in [u for u, b in view.bound.items() if b.pod.job_id == job_id]:
                del view.bound[uid]
            view.generation += 1


def _taken(view: ClusterView, job_id: str) -> dict[str, list[tuple[int, ...]]]:
    taken: dict[str, list[tuple[int, ...]]] = {}
    for binding in view.bound.values():
        if binding.pod.job_id == job_id:
            taken.setdefault(binding.node, []).append(binding.gpu_indices)
    return taken


def _serving_nodes(
    view: ClusterView, info: PodInfo, names: list[str]
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """A serving pod goes to inference servers; a loaned one full of training work fails
    (preemption may return it), a training node fails for good."""
    passed: list[str] = []
    failed: dict[str, str] = {}
    unresolvable: dict[str, str] = {}
    held = view.held_gpus()
    for name in names:
        seen = view.nodes.get(name)
        if seen is None:
            passed.append(name)  # unknown here: the scheduler's own checks decide
        elif seen.node.pool is Pool.TRAINING:
            unresolvable[name] = f"node {name!r} is a training node; serving pods need inference"
        elif seen.node.gpus - len(held.get(name, ())) >= info.gpus:
            passed.append(name)
        else:
            failed[name] = (
                f"loaned server {name!r} is busy with training; reclaiming it may free it"
                if seen.node.loaned
                else f"inference server {name!r} has fewer than {counted(info.gpus, 'free GPU')}"
            )
    return passed, failed, unresolvable


def _never_fits(node: Node, info: PodInfo) -> str | None:
    if not node.schedulable_for_training:
        why = "unhealthy or cordoned" if not node.healthy else "an inference server not lent"
        return f"node {node.id!r} takes no training work: it is {why}"
    if node.gpus < info.gpus:
        return f"node {node.id!r} has {counted(node.gpus, 'GPU')}; pod {info.key} needs {info.gpus}"
    return None


def _victims(uids: Iterable[str], violations: int) -> MetaVictims:
    return MetaVictims(pods=[MetaPod(uid=uid) for uid in uids], num_pdb_violations=violations)


def _message(error: Exception) -> str:
    if isinstance(error, ApiError) and error.problems:
        shown = "; ".join(f"{p.path}: {p.message}" for p in error.problems[:5])
        return f"{error.detail} ({shown})"
    return str(error)


def _invalid(error: WireError) -> InvalidRequestError:
    return InvalidRequestError(str(error), [Problem(path=error.path, message=str(error))])


class ApiBinder:
    """Binds pods through the Kubernetes API with the official client (`kubernetes`).

    `source` is `in-cluster` (the service account of the pod Arbiter runs in) or the
    path of a kubeconfig file. The client is built once, here, when the app starts.
    """

    def __init__(self, source: str) -> None:
        from kubernetes import client, config  # noqa: PLC0415 - only when binding is on

        configuration = client.Configuration()
        if source == "in-cluster":
            config.load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
        else:
            config.load_kube_config(  # type: ignore[no-untyped-call]
                config_file=source, client_configuration=configuration
            )
        self._models = client
        self._core = client.CoreV1Api(client.ApiClient(configuration))

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        models = self._models
        binding = models.V1Binding(
            metadata=models.V1ObjectMeta(name=name, namespace=namespace, uid=uid),
            target=models.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        # The API answers a Status, not a Binding; reading it as one fails in the client,
        # so the answer is taken raw (a refusal still raises ApiException).
        self._core.create_namespaced_binding(namespace, binding, _preload_content=False)
