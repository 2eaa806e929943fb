"""The in-memory cluster: the control plane's ports without Ray, in one process.

One cluster for the Ray-free test tier (tests/control) and for `raygang sim` (whose
`SimCluster` adds a trace's jobs and their work to it): nodes with resources, bookings
made as a pinned placement group would be (a run waits while its nodes cannot hold it,
and times out), members that start, run and end as their `MemoryProgram` says, nodes
that die, usage by work outside raygang, jobs whose gangs are placed inside them.

Nothing polls. A run that waits (for room to reserve, for its members' bodies to end,
for a grace period) waits for the next change of the cluster (a booking freed, a node
lost or added, outside usage changed, a member told or released) and for the moments its
members' programs name (a body ends, fails): each is a timer. On an event loop in
virtual time (`control.virtual`) a scenario costs its callbacks, not its duration.

Seeded jitter: with a `seed`, each step that takes time on Ray (a placement group
becoming ready, a role's members starting, a reply to a preemption signal, a removal,
a teardown) takes a few milliseconds drawn from that seed. The control plane's tasks
then interleave differently under each seed, and a seed reproduces an interleaving: a
race found under one seed is found again under it, every time.

What members do follows from the times recorded here, not from one event loop, so a
second control plane (a restarted scheduler, on another loop) can adopt runs the first
one started: `resume` arms their timers on its own loop.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Collection, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raygang.control.memory_run import (
    EPSILON_S,
    MemoryMember,
    MemoryProgram,
    MemoryRun,
    programs_of,
)
from raygang.control.errors import ClusterUnreachable
from raygang.control.ports import GangRun
from raygang.control.records import GangRecord
from raygang.control.status import MemberStatus
from raygang.core.budget import never_fits, take
from raygang.core.resources import ZERO, Resources, per_node
from raygang.core.snapshot import ClusterSnapshot, NodeState, PlacedGang
from raygang.core.spec import Resize

JITTER_S = 0.01  # with a seed: the most one step of a run takes (see the docstring)


@dataclass
class _Node:
    node_id: str
    total: Resources
    alive: bool = True
    outside: Resources = field(default_factory=Resources)  # used by work not of raygang
    unseen: Resources = field(default_factory=Resources)  # used, not yet in the view (lag)
    hidden: Resources = field(default_factory=Resources)  # freed, not yet in the view (lag)
    labels: Mapping[str, str] = field(default_factory=dict)  # rack, zone... (a topology's)


def _loop_clock() -> float:
    return asyncio.get_running_loop().time()


class MemoryCluster:
    """Nodes, what is booked on them, and the runs of programmed members (the `Cluster`
    port). Booking keys: a gang's id (its minimum, or all of a rigid gang) and
    `<gang id>/<member>` (each surplus member of an elastic gang, as on Ray, where each
    has a placement group of its own)."""

    # runs add and remove an elastic gang's surplus members, or restart it whole
    resizes: frozenset[Resize] = frozenset({Resize.LIVE, Resize.RESTART})
    calls_block = False  # read in place: the cycle's interleaving stays as it was
    always_answers = False  # a test may cut it off (`outage`)
    gangs_inside_jobs = True  # a test opens budgets (`open_budget`)
    tells_changes = False  # a test changes nodes and work behind the loop's back

    def __init__(self, nodes: Iterable[tuple[str, Resources]],
                 clock: Callable[[], float] | None = None, seed: int | None = None,
                 jitter_s: float = JITTER_S, view_lag_s: float = 0.0,
                 labels: Mapping[str, Mapping[str, str]] | None = None):
        """`labels`: some nodes' labels, by node id (`{"w-1": {"rack": "r1"}}`)."""
        labels = labels or {}
        self.nodes = {node_id: _Node(node_id, total, labels=dict(labels.get(node_id, {})))
                      for node_id, total in nodes}
        # The running event loop's time by default: timers and the clock then agree (a
        # virtual-time loop's, or the real monotonic one).
        self.clock = clock or _loop_clock
        self.booked: dict[str, list[tuple[str, Resources]]] = {}  # key -> (node, bundle)s
        self._counts: dict[str, int] = {}  # gang id -> bundles booked (its members' too)
        self._free = {n: node.total for n, node in self.nodes.items()}  # as the view shows
        # Each node's last view, (its _Node, the NodeState): handed out again while the
        # node shows the same (immutable; observe runs every cycle, most nodes unchanged).
        self._views: dict[str, tuple[_Node, NodeState]] = {}
        # The last view's nodes, with what they were worked out from (what held gangs had
        # coming, the draining nodes), while nothing a view shows has changed since
        # (every change of what a view shows sets it to None): observe then reads no node.
        self._last_view: tuple[dict[str, Resources], frozenset[str], tuple[NodeState, ...]] \
            | None = None
        self._last_held: tuple[PlacedGang, ...] | None = None  # what it was read for
        self.members: dict[str, list[MemoryMember]] = {}  # gang id -> members, by rank
        self.budgets: dict[str, MemoryBudget] = {}  # job id -> the budget its gangs use
        self._rng = random.Random(seed) if seed is not None else None
        self._jitter_s = jitter_s
        self._waiters: list[asyncio.Future[None]] = []
        # A booking removed shows free in the view (`free(seen=True)`, `observe`) this long
        # after the room is free (Ray's GCS: tens of milliseconds). A reservation asked for
        # before the view shows its room is noted in `asked_early`: on Ray it would be
        # placed only on a later retry of the GCS (`Cluster.until_free`).
        self.view_lag_s = view_lag_s
        self.asked_early: list[str] = []
        self.outage = False  # a test's GCS outage: `observe` raises ClusterUnreachable
        # A test's: members started meanwhile never start, as Ray loses an actor's
        # creation when its GCS dies while scheduling it (`GangRun.lost_members`)
        self.losing_creations = False
        # Called when a gang starts running: the scheduler's view changed without an event
        # of its own (a resync on Ray finds it; the simulator wakes its loop at once).
        self.on_change: Callable[[], None] = lambda: None

    # What tests and traces do to it ------------------------------------------------------
    def lose_node(self, node_id: str) -> None:
        """The node dies: every member on it dies with it."""
        self.nodes[node_id].alive = False
        self._last_view = None
        for members in self.members.values():
            for member in members:
                if member.node == node_id and not member.dead:
                    member.dead = f"node {node_id} was lost"
        self.notify()

    def add_node(self, node_id: str, total: Resources,
                 labels: Mapping[str, str] | None = None) -> None:
        """A node joins (again: a lost node comes back empty, with its labels unless
        given new ones)."""
        used = self._used_on(node_id)
        if labels is None:
            labels = self.nodes[node_id].labels if node_id in self.nodes else {}
        self.nodes[node_id] = _Node(node_id, total, labels=dict(labels))
        self._free[node_id] = total - used
        self._last_view = None
        self.notify()

    def use_outside(self, node_id: str, used: Resources, seen: bool = True) -> None:
        """Work not started by raygang now uses `used` on the node; `seen=False`: the
        cluster's view does not show it yet (its lag), though it takes the room."""
        node = self.nodes[node_id]
        if seen:
            self._free[node_id] = self._free[node_id] + node.outside - used
            self._last_view = None
            node.outside = used
        else:
            node.unseen = used
        self.notify()

    def free(self, node_id: str, seen: bool = False) -> Resources:
        """What is free on the node (`seen`: as the cluster's view shows it, which may
        lag: usage `unseen` is not in it yet, room freed `hidden` not yet either)."""
        free, node = self._free[node_id], self.nodes[node_id]
        lag = node.hidden if seen else node.unseen
        return free - lag if lag else free  # (no subtraction where nothing lags: observe
        # reads every node each cycle)

    def shown(self, bundles: Iterable[tuple[str, Resources]]) -> bool:
        """Whether the view shows the bundles, each on its node, free together."""
        return self.fits(bundles, seen=True)

    # Booking ---------------------------------------------------------------------------
    def fits(self, bundles: Iterable[tuple[str, Resources]], seen: bool = False) -> bool:
        """Whether the bundles, each on its node, fit in what is free now (`seen`: as the
        view shows it)."""
        return all(self.nodes[n].alive and amount.fits_in(self.free(n, seen))
                   for n, amount in per_node(bundles).items())

    def book(self, key: str, bundles: Sequence[tuple[str, Resources]]) -> None:
        self._give_back(key)  # booked again at once: the view never shows it free
        self._last_view = None
        for node, bundle in bundles:
            self._free[node] = self._free[node] - bundle
        self.booked[key] = list(bundles)
        owner = key.split("/", 1)[0]
        self._counts[owner] = self._counts.get(owner, 0) + len(bundles)

    def unbook(self, key: str, quiet: bool = False) -> None:
        for node, bundle in self._give_back(key):
            self._hide(node, bundle)
        if not quiet:
            self.notify()

    def _give_back(self, key: str) -> list[tuple[str, Resources]]:
        bundles = self.booked.pop(key, [])
        if bundles:
            owner = key.split("/", 1)[0]
            left = self._counts[owner] - len(bundles)
            if left:
                self._counts[owner] = left
            else:
                del self._counts[owner]
        for node, bundle in bundles:
            self._free[node] = self._free[node] + bundle
        if bundles:
            self._last_view = None
        return bundles

    def _hide(self, node_id: str, freed: Resources) -> None:
        """The view shows `freed` only `view_lag_s` from now."""
        if self.view_lag_s <= 0 or node_id not in self.nodes:
            return
        node = self.nodes[node_id]
        node.hidden = node.hidden + freed
        self._last_view = None

        def show() -> None:
            node.hidden = (node.hidden - freed).positive()
            self._last_view = None
            self.notify()

        asyncio.get_running_loop().call_later(self.view_lag_s, show)

    def _used_on(self, node_id: str) -> Resources:
        return Resources.sum(b for bundles in self.booked.values() for n, b in bundles
                             if n == node_id)

    def clear(self, gang_id: str) -> int:
        """Kill a gang's members and drop its bookings; how many parts there were."""
        members = self.members.pop(gang_id, [])
        for member in members:
            member.dead = member.dead or "killed"
        keys = [k for k in self.booked if k == gang_id or k.startswith(f"{gang_id}/")]
        for key in keys:
            self.unbook(key, quiet=True)
        self.notify()
        return len(members) + len(keys)

    # Waiting ---------------------------------------------------------------------------
    def notify(self) -> None:
        """Something changed: every waiter looks again."""
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done() and not waiter.get_loop().is_closed():
                waiter.set_result(None)

    async def changed(self, deadline: float | None = None) -> None:
        """Until the next change, or until the clock reaches `deadline`."""
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            if deadline is None:
                await waiter
            else:
                await asyncio.wait([waiter], timeout=max(0.0, deadline - self.clock()))
        finally:
            waiter.cancel()  # (done already, or no longer waited for)

    async def until(self, ready: Callable[[], bool], deadline: float | None = None) -> bool:
        """Until `ready()` holds (True), or the clock reaches `deadline` (False)."""
        while not ready():
            if deadline is not None and self.clock() >= deadline - EPSILON_S:
                return False
            await self.changed(deadline)
        return True

    def arm(self, moments: Iterable[float]) -> None:
        """Wake the waiters at each of these moments (a body ends then: nothing else
        would tell them)."""
        loop, now = asyncio.get_running_loop(), self.clock()
        for moment in moments:
            if moment > now:
                loop.call_later(moment - now, self.notify)

    async def step(self) -> None:
        """One step of a run taking time on a real cluster: with a seed, a few random
        milliseconds (see the module's docstring); else none at all."""
        if self._rng is not None:
            await asyncio.sleep(self._rng.uniform(0.0, self._jitter_s))

    # The port ---------------------------------------------------------------------------
    async def answers(self, timeout: float) -> bool:
        return not self.outage

    def observe(self, held: Iterable[PlacedGang], draining: Collection[str]) -> ClusterSnapshot:
        """Free is what the view shows (`free(seen=True)`), but never more than the node's
        total less what `held` holds: a gang admitted and not booked yet (waiting for
        its victims) takes its room already, as on Ray (runtime/scheduler/observe.py)."""
        if self.outage:
            raise ClusterUnreachable("the cluster does not answer (a test's outage)")
        held = tuple(held)
        gone = frozenset(draining)
        last = self._last_view
        # The very same held gangs, and no booking since the last view (each sets it to
        # None): what they have coming is as it was.
        if last is not None and held is self._last_held and last[1] == gone:
            return ClusterSnapshot(last[2], held)
        coming = self._coming(held)
        if last is not None and last[0] == coming and last[1] == gone:
            self._last_held = held
            return ClusterSnapshot(last[2], held)
        nodes = []
        views = self._views
        for node in self.nodes.values():
            node_id = node.node_id
            free = ZERO
            if node.alive and node_id not in gone:
                free = self.free(node_id, seen=True)
                if node_id in coming:
                    free = free.minimum(node.total - self._used_on(node_id) - coming[node_id])
            view = views.get(node_id)
            if view is None or view[0] is not node or view[1].alive != node.alive \
                    or view[1].free != free:
                view = views[node_id] = (node, NodeState(
                    node_id, node.total, free, node.labels, alive=node.alive, name=node_id))
            nodes.append(view[1])
        shown = tuple(nodes)
        self._last_view = (coming, gone, shown)
        self._last_held = held
        return ClusterSnapshot(shown, held)

    def _coming(self, held: Sequence[PlacedGang]) -> dict[str, Resources]:
        """Per node, what held gangs hold in the book and not yet in the cluster. Cheap
        when every held gang is booked whole (the common case: one count per gang)."""
        counts = self._counts  # kept as bookings come and go, not counted per view
        coming: dict[str, Resources] = {}
        for gang in held:
            if counts.get(gang.gang_id, 0) == len(gang.bundles):
                continue
            booked = per_node(pair for key, bundles in self.booked.items()
                              if key == gang.gang_id or key.startswith(f"{gang.gang_id}/")
                              for pair in bundles)
            for node, bundle in gang.bundles:
                if node in booked and bundle.fits_in(booked[node]):
                    booked[node] = booked[node] - bundle  # this one is booked
                else:
                    coming[node] = coming[node] + bundle if node in coming else bundle
        return coming

    async def until_free(self, bundles: Sequence[tuple[str, Resources]],
                         timeout: float) -> bool:
        return await self.until(lambda: self.shown(bundles), self.clock() + timeout)

    def new_run(self, record: GangRecord, nodes: Sequence[str], attempt: int,
                on_member_ready: Callable[[MemberStatus], None]) -> GangRun:
        return MemoryRun(self, record.gang_id, record.spec, programs_of(record), nodes,
                         on_member_ready)

    def leftovers(self, known: Container[str]) -> MemoryLeftovers:
        return MemoryLeftovers(self, known)

    def budget(self, job_id: str) -> MemoryBudget | None:
        return self.budgets.get(job_id)

    def open_budget(self, job_id: str) -> MemoryBudget:
        """Let running gang `job_id` act as a job whose driver submits gangs (tests)."""
        self.budgets[job_id] = MemoryBudget(self, job_id)
        return self.budgets[job_id]

    def adopt(self, record: GangRecord, leftovers: Any) -> GangRun | None:
        members = self.members.get(record.gang_id, [])
        if (record.gang_id not in self.booked or len(members) != len(record.nodes)
                or any(m.dead for m in members)):
            return None
        # The members it grows are the record's as a new run's are (fleet.admit)
        run = MemoryRun(self, record.gang_id, record.spec, programs_of(record), record.nodes,
                        record.members.append)
        run.members = members
        return run

    async def fetch(self, results: list[Any]) -> list[Any]:
        return list(results)

    def restore_results(self, values: list[Any]) -> list[Any]:
        return list(values)

    async def job_logs(self, ray_job_id: str) -> str:
        return ""  # its jobs are gangs standing in for them: nothing runs to print


class MemoryBudget:
    """A job's budget without Ray (`control.ports.JobBudget`): the bundles a running gang
    booked, handed to the gangs placed inside it (their booking replaces the job's, as a
    job's holds make way for its gangs' placement groups on Ray). Opened by a test, for a
    gang standing in for a job (`MemoryCluster.open_budget`)."""

    def __init__(self, cluster: MemoryCluster, job_id: str):
        self._cluster = cluster
        self._job_id = job_id
        self._booked = list(cluster.booked[job_id])  # (node, bundle) per bundle
        self.bundles = tuple(b for _, b in self._booked)
        self.taken: dict[str, list[int]] = {}  # gang id -> bundle indices

    def never_fits(self, wanted: Sequence[Resources]) -> str | None:
        return never_fits(self.bundles, wanted)

    def take(self, gang_id: str, wanted: Sequence[Resources]) -> list[str] | None:
        chosen = take(self.bundles, [i for i in range(len(self.bundles))
                                     if i not in self._used()], wanted)
        if chosen is None:
            return None
        self.taken[gang_id] = chosen
        self._rebook()
        return [self._booked[i][0] for i in chosen]

    def give_back(self, gang_id: str) -> None:
        self.taken.pop(gang_id, None)
        self._rebook()

    def in_use(self) -> int:
        return len(self._used())

    def restore(self, gang_id: str, nodes: Sequence[str],
                bundles: Sequence[Resources]) -> None:
        """Nothing to learn again: this budget lives in the cluster, not in the scheduler
        process that restarted."""

    def _used(self) -> set[int]:
        return {i for indices in self.taken.values() for i in indices}

    def _rebook(self) -> None:
        if self._job_id in self._cluster.booked:  # not once the job let go
            used = self._used()
            self._cluster.book(self._job_id,
                               [b for i, b in enumerate(self._booked) if i not in used])
            self._cluster.notify()


class MemoryLeftovers:
    """Recovery's view: what runs the cluster still has, by gang id."""

    def __init__(self, cluster: MemoryCluster, known: Container[str]):
        self._cluster = cluster
        self._known = known
        self._taken: set[str] = set()

    def take(self, gang_id: str) -> None:
        self._taken.add(gang_id)

    def clear(self, gang_id: str | None) -> int:
        return 0 if gang_id is None else self._cluster.clear(gang_id)

    def orphans(self, unfinished: set[str], unknown: bool = True) -> int:
        gangs = {key.split("/", 1)[0] for key in self._cluster.booked}
        stale = (gangs | set(self._cluster.members)) - unfinished
        if not unknown:
            stale = {gang_id for gang_id in stale if gang_id in self._known}
        return sum(self._cluster.clear(g) for g in stale - self._taken)


__all__ = ["MemoryBudget", "MemoryCluster", "MemoryLeftovers", "MemoryProgram"]
