"""The control plane's `Cluster` port on Ray.

- observe: nodes and free resources from the GCS (`observe.py`);
- a run per admitted gang: `GangLaunch` (placement group + member actors) or, for a
  deployment, `ServeLaunch` (a Serve application on the reserved nodes) — a new kind of
  gang is a new run class chosen in `new_run`;
- recovery: the `raygang-*` member actors and placement groups left in Ray
  (`RayLeftovers`), adopting a running gang whose parts are all there;
- results: object refs, fetched to keep them in the store and put back after a restart.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import ray
from ray.util.placement_group import placement_group_table, remove_placement_group

from raygang.control.ports import GangRun
from raygang.control.records import GangRecord
from raygang.control.status import MemberStatus
from raygang.core.gang import GangState
from raygang.core.resources import Resources, per_node
from raygang.core.snapshot import ClusterSnapshot, PlacedGang
from raygang.core.spec import Resize
from raygang.runtime.deployment import ServeLaunch
from raygang.runtime.handoff import holds_of
from raygang.runtime.jobclient import JobClient
from raygang.runtime.jobs import JOB_ACTOR, JobLaunch
from raygang.runtime.trainrun import TrainLaunch, TrainSession
from raygang.runtime.launcher import GangLaunch
from raygang.runtime.names import NAMESPACE, PREFIX, SCHEDULER_NAME, member_name, pg_name
from raygang.runtime.observe import observe, schedulable
from raygang.runtime.ray_private import (
    available_resources_per_node,
    group_nodes,
    placement_group,
)

log = logging.getLogger(__name__)
FREE_POLL_S = 0.01  # how often `until_free` reads the GCS (the view lags by 10-100 ms)


class RayCluster:
    # GangLaunch adds and removes an elastic gang's surplus members, or restarts it whole
    resizes = frozenset({Resize.LIVE, Resize.RESTART})

    def __init__(self, serve_http_port: int | None, lease_s: float = 120.0,
                 jobs_address: str | None = None):
        self.serve_http_port = serve_http_port
        self.lease_s = lease_s
        self.jobs = JobClient(jobs_address)
        # Hand-offs under way, by id: a Train run's (its gang id, or "<job id>/<run>").
        self.sessions: dict[str, TrainSession] = {}
        self.launches: dict[str, JobLaunch] = {}  # running jobs (Train runs find budgets)

    def observe(self, held: Iterable[PlacedGang], draining: Collection[str]) -> ClusterSnapshot:
        return observe(held, draining)

    async def until_free(self, bundles: Sequence[tuple[str, Resources]],
                         timeout: float) -> bool:
        """Until the GCS shows `bundles` free on their nodes. A placement group created
        before it does (a removed group's resources show tens of milliseconds after the
        removal) fails its first try; the GCS retries it after a backoff only when
        something else makes it schedule, else at its tick, once a second: reserved
        ~0.5 s late on average. Created once the room shows, it is placed at once."""
        need = per_node(bundles)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            available = available_resources_per_node()
            if all(amount.fits_in(schedulable(available.get(node, {})))
                   for node, amount in need.items()):
                return True
            if loop.time() >= deadline:
                return False
            await asyncio.sleep(FREE_POLL_S)

    def new_run(self, record: GangRecord, nodes: Sequence[str], attempt: int,
                on_member_ready: Callable[[MemberStatus], None]) -> GangRun:
        if record.kind == "deployment":
            return ServeLaunch(record.gang_id, record.spec, record.deployment, record.app,
                               nodes, self.serve_http_port, moved=record.rebook)
        if record.kind == "job":
            def started(job_id: str) -> None:
                record.ray_job_id = job_id
                # Its one member is the driver (Ray's job supervisor actor), on the node
                # of the job's first bundle.
                on_member_ready(MemberStatus(role="driver", index=0, rank=0,
                                             actor_name=JOB_ACTOR.format(job_id),
                                             node_id=nodes[0]))

            launch = JobLaunch(record.gang_id, record.spec, record.workload, nodes, attempt,
                               self.jobs, self.lease_s, self.sessions, started)
            return self._job(record.gang_id, launch)
        if record.kind == "train":
            return TrainLaunch(record.gang_id, record.spec, nodes, self.lease_s,
                               (record.workload or {}).get("controller"), self.sessions)
        return GangLaunch(record.gang_id, record.spec, record.programs, nodes, attempt,
                          on_member_ready=on_member_ready)

    def budget(self, job_id: str) -> JobLaunch | None:
        """A running job's budget, for the gangs and deployments its driver submits."""
        return self.launches.get(job_id)

    def leftovers(self, known: set[str]) -> RayLeftovers:
        return RayLeftovers(known)

    def adopt(self, record: GangRecord, leftovers: RayLeftovers) -> GangRun | None:
        """A running gang whose members and placement group are all still there, or a
        running deployment whose Serve application still exists."""
        if record.state is not GangState.RUNNING:
            return None
        if record.kind == "deployment":
            from raygang.runtime import serving  # imports Serve: only with a deployment to adopt

            name = record.deployment.name
            if serving.app_lost(name) is not None:
                return None
            surplus = {}
            if record.spec.elastic:  # its replicas beyond the minimum, as Serve runs them
                nodes = serving.replica_nodes(name) or []
                extra = record.spec.surplus_slots[:max(0, len(nodes) - len(record.nodes))]
                surplus = {slot.name: "" for slot in extra}  # where: followed just below
            launch = ServeLaunch.adopted(record.gang_id, record.spec, record.deployment,
                                         record.nodes, self.serve_http_port, surplus,
                                         moved=record.rebook)
            record.surplus = dict(surplus)
            if surplus:
                launch.follow(nodes)
            return launch
        if record.kind == "job":
            return self._adopt_job(record)
        if record.kind == "train":
            group = (record.workload or {}).get("group")
            placed = group_nodes(group) if group else None
            if placed is None:
                return None
            surplus = {}
            if record.spec.elastic:  # its workers beyond the minimum, where Train runs them
                extra = Counter(n for n in placed if n) - Counter(record.nodes)
                surplus = dict(zip((s.name for s in record.spec.surplus_slots),
                                   sorted(extra.elements())))
            record.surplus = dict(surplus)
            return TrainLaunch.adopted(record.gang_id, record.spec, record.nodes,
                                       self.lease_s, record.workload.get("controller"), group,
                                       self.sessions, surplus)
        return self._adopt_gang(record, leftovers)

    @staticmethod
    def _adopt_gang(record: GangRecord, leftovers: RayLeftovers) -> GangLaunch | None:
        """Its minimum's group and members must all be there; an elastic gang's surplus
        members are those found whole (member and own group, `record.surplus` is set to
        them: the journal does not follow resizes); a half-made one is removed."""
        gang_id, spec = record.gang_id, record.spec
        groups = {leftovers.names[g]: g for g in leftovers.groups.get(gang_id, [])}
        actors = set(leftovers.actors.get(gang_id, []))
        main = groups.pop(pg_name(gang_id), None)
        if main is None or any(member_name(gang_id, s) not in actors for s in spec.min_slots):
            return None
        surplus = {}
        for slot in spec.surplus_slots:
            group, actor = groups.pop(member_name(gang_id, slot), None), member_name(gang_id, slot)
            if group is not None and actor in actors:
                surplus[slot.name] = group
            else:
                leftovers.remove(actor if actor in actors else None, group)
        if groups:  # a group of no member of it: not this gang's as it runs
            return None
        launch = GangLaunch.adopt(gang_id, spec, record.nodes,
                                  attempt=record.restarts + record.preemptions, pg_id=main,
                                  surplus=surplus, programs=record.programs)
        if launch is not None:
            record.surplus = {name: (group_nodes(g) or [None])[0] or ""
                              for name, g in surplus.items()}
        return launch

    def _job(self, gang_id: str, launch: JobLaunch) -> JobLaunch:
        self.launches[gang_id] = launch

        def closed() -> None:  # this attempt's, not a later attempt's already registered
            if self.launches.get(gang_id) is launch:
                del self.launches[gang_id]

        launch.on_close = closed
        return launch

    def _adopt_job(self, record: GangRecord) -> JobLaunch | None:
        """A job whose Ray job still runs (Ray Jobs outlive the scheduler)."""
        if record.ray_job_id is None or self.jobs.status_now(record.ray_job_id) != "RUNNING":
            return None
        launch = JobLaunch.adopted(record.gang_id, record.spec, record.workload, record.nodes,
                                   record.ray_job_id, self.jobs, self.lease_s, self.sessions,
                                   holds_of(record.gang_id))
        return self._job(record.gang_id, launch)

    async def fetch(self, results: list[Any]) -> list[Any]:
        return list(await asyncio.gather(*results))

    def restore_results(self, values: list[Any]) -> list[Any]:
        return [ray.put(value) for value in values]


class RayLeftovers:
    """The `raygang-*` member actors and placement groups in Ray, read once (a rebuild with
    a thousand gangs must not list every actor and group per gang), by gang id."""

    def __init__(self, known: set[str]):
        self.actors: dict[str | None, list[str]] = {}  # gang id (None: no known gang) -> names
        self.groups: dict[str | None, list[str]] = {}  # gang id -> placement group ids
        self.names: dict[str, str] = {}  # placement group id -> its name
        for actor in ray.util.list_named_actors(all_namespaces=True):
            name = actor["name"]
            if actor["namespace"] == NAMESPACE and name.startswith(PREFIX) \
                    and name != SCHEDULER_NAME:
                self.actors.setdefault(gang_of(name, known), []).append(name)
        for pg_id, info in placement_group_table().items():
            name = info.get("name") or ""
            if name.startswith(PREFIX) and info.get("state") != "REMOVED":
                self.groups.setdefault(gang_of(name, known), []).append(pg_id)
                self.names[pg_id] = name

    def take(self, gang_id: str) -> None:
        self.actors.pop(gang_id, None)
        self.groups.pop(gang_id, None)

    def clear(self, gang_id: str | None) -> int:
        """Kill the gang's members and remove its placement groups; how many there were."""
        removed = 0
        for name in self.actors.pop(gang_id, []):
            removed += self.remove(name, None)
        for pg_id in self.groups.pop(gang_id, []):
            removed += self.remove(None, pg_id)
        return removed

    @staticmethod
    def remove(actor: str | None, pg_id: str | None) -> int:
        """Kill member actor `actor` and remove placement group `pg_id`; how many were."""
        removed = 0
        if actor is not None:
            try:
                ray.kill(ray.get_actor(actor, namespace=NAMESPACE), no_restart=True)
                removed += 1
            except ValueError:  # gone meanwhile
                pass
        if pg_id is not None:
            try:  # by id: a name is only unique within the namespace that created it
                remove_placement_group(placement_group(pg_id))
                removed += 1
            except Exception:  # removed meanwhile
                log.debug("removing placement group %s failed", pg_id, exc_info=True)
        return removed

    def orphans(self, unfinished: set[str]) -> int:
        """Remove everything of no unfinished gang."""
        stale = (set(self.actors) | set(self.groups)) - unfinished
        return sum(self.clear(gang_id) for gang_id in stale)


def gang_of(name: str, known: set[str]) -> str | None:
    """The known gang id a `raygang-<gang id>[-<role>-<index>]` name belongs to (gang ids
    and role names may hold dashes: try each cut, longest id first)."""
    parts = name[len(PREFIX):].split("-")
    for cut in range(len(parts), 0, -1):
        candidate = "-".join(parts[:cut])
        if candidate in known:
            return candidate
    return None
