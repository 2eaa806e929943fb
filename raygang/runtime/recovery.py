"""Rebuilding the scheduler's book after its actor restarted (Ray restarts it: it is
created with `max_restarts=-1`), from the store and from what is left in Ray.

- Queue changes made at run time are applied again over the config.
- Finished and cancelled gangs stay as they were (their results are not kept across a
  restart: the object refs belonged to the old process).
- A gang whose cancellation was written but not carried out is cancelled now.
- A pending gang keeps its id and its place in line (same submission sequence).
- A running gang whose members (detached, named) and placement group are all there is
  adopted: the new process takes over its run (launcher.GangLaunch.resume) without
  restarting anything; its history says so. A running deployment whose Serve application
  still exists is adopted the same way (Serve's controller is detached too).
- A gang that was admitted or starting, or running but missing a part, is torn down (its
  named members and its `raygang-<id>` placement group, found by name) and requeued, with
  an event saying so. It counts as neither a restart nor a preemption.
- Placement groups and member actors named `raygang-*` that belong to no unfinished gang
  are removed (orphans of a crash between creating them and recording it).
- Idempotency keys are restored, so a client retrying across the restart gets its gang.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import TYPE_CHECKING, Any

import ray
from ray._raylet import PlacementGroupID
from ray.util.placement_group import (
    PlacementGroup,
    placement_group_table,
    remove_placement_group,
)

from raygang.core.gang import GangState
from raygang.runtime.durable import GANGS, QUEUES, RESULTS, load_gang, load_queue
from raygang.runtime.deployment import ServeLaunch
from raygang.runtime.launcher import NAMESPACE, GangLaunch
from raygang.runtime.records import GangRecord

if TYPE_CHECKING:
    from raygang.runtime.scheduler import Scheduler

log = logging.getLogger(__name__)
PREFIX = "raygang-"


async def rebuild(scheduler: Scheduler) -> dict[str, Any]:
    """Fill `scheduler`'s book from its store; returns what it found and did."""
    started = time.monotonic()
    store = scheduler._store
    queues = [load_queue(raw) for raw in (await store.load(QUEUES)).values()]
    if queues:
        scheduler._config = scheduler._with_queues(queues)
    records = sorted((load_gang(raw) for raw in (await store.load(GANGS)).values()),
                     key=lambda r: r.seq)
    found = {"gangs": len(records), "pending": 0, "adopted": 0, "requeued": 0,
             "cancelled": 0, "finished": 0, "orphans_removed": 0}
    now = scheduler._clock()
    leftovers = Leftovers({r.gang_id for r in records})
    for record in records:
        record.saved = True
        record.on_change = scheduler._mark_dirty
        scheduler._gangs[record.gang_id] = record
        if record.idempotency_key and record.fingerprint:
            scheduler._idempotent.remember(record.idempotency_key, record.fingerprint,
                                           record.gang_id, record.submitted_at)
        if record.deployment is not None:
            scheduler._deployments[record.deployment.name] = record.gang_id  # latest wins
        if record.state.finished:
            scheduler._finished.append(record.gang_id)
            found["finished"] += 1
            continue
        if record.cancel_reason:
            leftovers.clear(record.gang_id)
            record.requeue_after_restart("scheduler restarted; carrying out the cancellation",
                                         now)
            record.move(GangState.CANCELLED, record.cancel_reason, now)
            scheduler._finished.append(record.gang_id)
            found["cancelled"] += 1
        elif record.state is GangState.PENDING:
            found["pending"] += 1
        elif (launch := _adoptable(record, leftovers,
                                   scheduler._config.serve_http_port)) is not None:
            scheduler._adopt(record, launch)
            leftovers.actors.pop(record.gang_id, None)  # its own now, not leftovers
            leftovers.groups.pop(record.gang_id, None)
            found["adopted"] += 1
        else:
            leftovers.clear(record.gang_id)
            record.requeue_after_restart(
                f"requeued: the scheduler restarted while the gang was {record.state.value}",
                now)
            found["requeued"] += 1
    found["results_expired"] = await _expire_results(scheduler, records, now)
    unfinished = {r.gang_id for r in records if not r.state.finished}
    found["orphans_removed"] = leftovers.orphans(unfinished)
    scheduler._seq = itertools.count(max((r.seq for r in records), default=-1) + 1)
    found["seconds"] = round(time.monotonic() - started, 3)
    if records:
        log.warning("raygang scheduler recovered its state: %s", found)
    return found


async def _expire_results(scheduler: Scheduler, records: list[GangRecord], now: float) -> int:
    """Drop kept results past their retention (and any of a gang no longer known)."""
    keep_for = scheduler._config.state.results_retention_s
    fresh = {r.gang_id for r in records if r.results_kept and r.finished_at is not None
             and now - r.finished_at < keep_for}
    expired = 0
    for gang_id in await scheduler._store.keys(RESULTS):
        if gang_id not in fresh:
            await scheduler._store.delete(RESULTS, gang_id)
            expired += 1
    for record in records:
        record.results_kept = record.gang_id in fresh
    return expired


def _adoptable(record: GangRecord, leftovers: Leftovers,
               http_port: int | None) -> GangLaunch | ServeLaunch | None:
    """A running gang whose members and placement group are all still there, or a running
    deployment whose Serve application still exists."""
    if record.state is not GangState.RUNNING:
        return None
    if record.kind == "deployment":
        from raygang.runtime import serving  # imports Serve: only with a deployment to adopt

        if serving.app_lost(record.deployment.name) is not None:
            return None
        return ServeLaunch.adopted(record.gang_id, record.spec, record.deployment,
                                   record.nodes, http_port)
    groups = leftovers.groups.get(record.gang_id, [])
    if len(groups) != 1 or len(leftovers.actors.get(record.gang_id, [])) != len(record.spec.slots):
        return None
    return GangLaunch.adopt(record.gang_id, record.spec, record.nodes,
                            attempt=record.restarts + record.preemptions, pg_id=groups[0])


class Leftovers:
    """The `raygang-*` member actors and placement groups in Ray, read once (a rebuild with
    a thousand gangs must not list every actor and group per gang), by gang id."""

    def __init__(self, known: set[str]):
        from raygang.runtime.scheduler import SCHEDULER_NAME

        self.actors: dict[str | None, list[str]] = {}  # gang id (None: no known gang) -> names
        self.groups: dict[str | None, list[str]] = {}  # gang id -> placement group ids
        for actor in ray.util.list_named_actors(all_namespaces=True):
            name = actor["name"]
            if actor["namespace"] == NAMESPACE and name.startswith(PREFIX) \
                    and name != SCHEDULER_NAME:
                self.actors.setdefault(_gang_of(name, known), []).append(name)
        for pg_id, info in placement_group_table().items():
            name = info.get("name") or ""
            if name.startswith(PREFIX) and info.get("state") != "REMOVED":
                self.groups.setdefault(_gang_of(name, known), []).append(pg_id)

    def clear(self, gang_id: str | None) -> int:
        """Kill the gang's members and remove its placement groups; how many there were."""
        removed = 0
        for name in self.actors.pop(gang_id, []):
            try:
                ray.kill(ray.get_actor(name, namespace=NAMESPACE), no_restart=True)
                removed += 1
            except ValueError:  # gone meanwhile
                pass
        for pg_id in self.groups.pop(gang_id, []):
            try:  # by id: a name is only unique within the namespace that created it
                remove_placement_group(PlacementGroup(PlacementGroupID(bytes.fromhex(pg_id))))
                removed += 1
            except Exception:  # removed meanwhile
                log.debug("removing placement group %s failed", pg_id, exc_info=True)
        return removed

    def orphans(self, unfinished: set[str]) -> int:
        """Remove everything of no unfinished gang."""
        stale = (set(self.actors) | set(self.groups)) - unfinished
        return sum(self.clear(gang_id) for gang_id in stale)


def _gang_of(name: str, known: set[str]) -> str | None:
    """The known gang id a `raygang-<gang id>[-<role>-<index>]` name belongs to (gang ids
    and role names may hold dashes: try each cut, longest id first)."""
    parts = name[len(PREFIX):].split("-")
    for cut in range(len(parts), 0, -1):
        candidate = "-".join(parts[:cut])
        if candidate in known:
            return candidate
    return None
