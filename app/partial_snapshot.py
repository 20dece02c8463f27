"""The cross-field problems of a snapshot that does not decode, for one answer listing all.

A body the decoder refuses never reaches :func:`policies.model.snapshot_problems`, so
its caller would learn of a duplicate id or a GPU over capacity only after mending the
field-level error. On that slow path only, each node, job, tenant and inference request
of the raw JSON is decoded on its own; the ones that decode make up a partial snapshot,
and the core's own cross-field checks run on it. A part with a broken field is left out
(its field-level problem is already listed), and so is what it alone would explain: a
job placed on a node that is present but broken is not called a job on an unknown node.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import msgspec
import orjson

from policies.model import (
    Frozen,
    InferenceLoad,
    InferenceRequest,
    Job,
    Node,
    Problem,
    Snapshot,
    Tenant,
    decode,
    snapshot_problems,
)

T = TypeVar("T")

_INDEXED = re.compile(r"^(?P<part>nodes|jobs|tenants|inference\.requests)\[(?P<i>\d+)\]")
_PLACED_ON = re.compile(r"^jobs\[(?P<i>\d+)\]\.placement\[(?P<k>\d+)\]\.node_id$")


def snapshot_fields(kind: type[Frozen]) -> list[str]:
    """The JSON keys of `kind` that hold a :class:`Snapshot`."""
    return [f.encode_name for f in msgspec.structs.fields(kind) if f.type is Snapshot]


def cross_field_problems(document: object, kind: type[Frozen]) -> list[Problem]:
    """The cross-field problems of every snapshot in `document` (a body of `kind`), at
    their JSON paths, judged on the parts of each snapshot that decode."""
    if not isinstance(document, dict):
        return []
    found: list[Problem] = []
    for key in snapshot_fields(kind):
        raw = document.get(key)
        if isinstance(raw, dict):
            found += [
                Problem(path=f"{key}.{p.path}", message=p.message) for p in partial_problems(raw)
            ]
    return found


def _list(raw: dict[str, Any], key: str) -> list[Any]:
    value = raw.get(key)
    return value if isinstance(value, list) else []


def _decodable(items: list[Any], kind: type[T]) -> tuple[list[T], list[int]]:
    """The items that decode as `kind`, and where each stood in `items`."""
    good: list[T] = []
    where: list[int] = []
    for i, item in enumerate(items):
        try:
            good.append(decode(orjson.dumps(item), kind))
        except (msgspec.MsgspecError, orjson.JSONEncodeError):
            continue
        where.append(i)
    return good, where


def partial_problems(raw: dict[str, Any]) -> list[Problem]:
    """:func:`snapshot_problems` of the parts of the raw snapshot `raw` that decode, with
    each path pointing into `raw` (so `jobs[3]` is the fourth job sent, broken ones
    counted)."""
    raw_nodes = _list(raw, "nodes")
    raw_jobs = _list(raw, "jobs")
    inference = raw.get("inference")
    raw_requests = _list(inference, "requests") if isinstance(inference, dict) else []
    nodes, node_at = _decodable(raw_nodes, Node)
    jobs, job_at = _decodable(raw_jobs, Job)
    tenants, tenant_at = _decodable(_list(raw, "tenants"), Tenant)
    requests, request_at = _decodable(raw_requests, InferenceRequest)
    partial = Snapshot(
        nodes=tuple(nodes),
        jobs=tuple(jobs),
        tenants=tuple(tenants),
        inference=InferenceLoad(requests=tuple(requests)),
    )
    where = {
        "nodes": node_at,
        "jobs": job_at,
        "tenants": tenant_at,
        "inference.requests": request_at,
    }
    decoded_ids = {n.id for n in nodes}
    # Only a text id can name a node a job is placed on: an id of any other type (an
    # object, a list) is a problem of its own, and not hashable either.
    broken_ids = {
        node_id
        for n in raw_nodes
        if isinstance(n, dict)
        and isinstance(node_id := n.get("id"), str)
        and node_id not in decoded_ids
    }

    def sent_index(match: re.Match[str]) -> str:
        return f"{match['part']}[{where[match['part']][int(match['i'])]}]"

    problems: list[Problem] = []
    for problem in snapshot_problems(partial):
        path = _INDEXED.sub(sent_index, problem.path, count=1)
        placed = _PLACED_ON.match(path)
        if placed is not None and _node_of(raw_jobs, placed) in broken_ids:
            continue  # the node is there; its own field-level problem is listed
        problems.append(Problem(path=path, message=problem.message))
    return problems


def _node_of(raw_jobs: list[Any], placed: re.Match[str]) -> object:
    job = raw_jobs[int(placed["i"])]
    return job["placement"][int(placed["k"])]["node_id"]
