"""The cluster id a simulation's snapshots carry, and so where a service keeps its state.

A service keeps policy state per cluster id (DESIGN §5: OASiS's committed schedules,
Tiresias's promotions, the dual agent's GP of machine speeds). A replay through a
service (`arbiter simulate --via-http`) that sent the cluster spec's name would read
and overwrite the state of a live cluster of that name, and would start from what an
earlier replay left. So a replay through a service gets an id of its own per profile
run (:func:`fresh_cluster_id`) unless the caller names one, and an id the caller names
is checked against the snapshot schema first (:func:`cluster_id_problem`).

The id changes no metric: neither the simulator nor any policy seeds anything from it,
and in process each run's engine keeps its own state whatever the id.
"""

from __future__ import annotations

import functools
import re
import uuid
from collections.abc import Sequence

import msgspec.inspect

from policies.model import Snapshot

FRESH_PREFIX = "sim-"
"""How an id made up for one replay begins (`sim-<spec name>-<8 hex digits>`)."""


@functools.cache
def _cluster_id_schema() -> msgspec.inspect.StrType:
    """`Snapshot.cluster_id`'s constraints, read from the schema so the two cannot drift."""
    info = msgspec.inspect.type_info(Snapshot)
    assert isinstance(info, msgspec.inspect.StructType)
    (field,) = (f for f in info.fields if f.name == "cluster_id")
    kind = field.type.type if isinstance(field.type, msgspec.inspect.Metadata) else field.type
    assert isinstance(kind, msgspec.inspect.StrType)
    return kind


def cluster_id_problem(value: str) -> str | None:
    """What makes `value` a cluster id the snapshot schema refuses, or None when it takes it."""
    schema = _cluster_id_schema()
    low, high = schema.min_length or 0, schema.max_length
    if len(value) < low or (high is not None and len(value) > high):
        length = f"is {len(value)} characters long" if value else "is empty"
        takes = f"{low} to {high}" if high is not None else f"at least {low}"
        return f"{length}; the snapshot schema's `cluster_id` takes {takes} characters"
    if schema.pattern is not None and re.search(schema.pattern, value) is None:
        return f"does not match the snapshot schema's `cluster_id` pattern {schema.pattern!r}"
    return None


def fresh_cluster_id(spec_name: str) -> str:
    """`sim-<spec name>-<8 hex digits of a uuid4>`: an id no live cluster and no earlier
    replay uses, so a replay's state in a service starts empty and stays its own. The
    spec's name is kept for whoever reads the service's decision log, shortened to fit."""
    suffix = "-" + uuid.uuid4().hex[:8]
    room = _cluster_id_schema().max_length or 255
    return FRESH_PREFIX + spec_name[: room - len(FRESH_PREFIX) - len(suffix)] + suffix


def run_cluster_ids(
    profiles: Sequence[str],
    spec_name: str,
    *,
    chosen: str | None,
    via_service: bool,
) -> list[str]:
    """The cluster id of each profile's run, in the order of `profiles`.

    In process, `chosen` (or the spec's name) for every run: each run's engine keeps its
    own state, so sharing an id shares nothing. Through a service, every run needs state
    of its own: without `chosen`, a fresh id per run; with it, `chosen` itself for a
    single run, else `<chosen>-<profile>`, names that say which run is which in the
    service's log and state (a profile given twice is refused: its two runs' ids would
    be one).

    Raises ValueError naming the id when one the schema refuses would be sent.
    """
    if chosen is not None:
        _check(chosen, "")
    if not via_service:
        return [chosen or spec_name] * len(profiles)
    if chosen is None:
        return [fresh_cluster_id(spec_name) for _ in profiles]
    if len(profiles) == 1:
        return [chosen]
    repeated = sorted({name for name in profiles if profiles.count(name) > 1})
    if repeated:
        raise ValueError(
            f"profile {repeated[0]!r} is given twice: each run through a service needs a "
            "cluster id of its own; give each profile once, or no cluster id"
        )
    ids = [f"{chosen}-{name}" for name in profiles]
    for cluster_id in ids:
        _check(cluster_id, " (the id and a profile's name, one per profile run)")
    return ids


def _check(cluster_id: str, what: str) -> None:
    problem = cluster_id_problem(cluster_id)
    if problem is not None:
        shown = cluster_id if len(cluster_id) <= 60 else cluster_id[:57] + "..."
        raise ValueError(f"cluster id {shown!r}{what} {problem}")
