"""The fleet: one driver per gang the cluster holds something for; it carries out a
plan's admissions and preemptions, and hands back what a gang held once it is released."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

from raygang.control.driver import GangDriver
from raygang.control.journal import Journal
from raygang.control.ports import Cluster, GangRun, Metrics
from raygang.control.records import GangRecord
from raygang.control.registry import Registry
from raygang.control.tasks import Spawn, spawn_free
from raygang.core.actions import ACTIONS
from raygang.core.lifecycle import Admitted, Adopted, RestartPolicy
from raygang.core.elastic import member_of
from raygang.core.gang import GangState
from raygang.core.plan import Admission, Growth, Preemption
from raygang.core.snapshot import PlacedGang

SETTLE_S = 0.5  # less than the loop's last re-check after a release (loop.py), 1 s
# How long a shutdown waits for ended gangs' teardown (their removals are GCS calls, which
# wait while the GCS is down: a shutdown then stops waiting, as it did before).
LET_GO_S = 60.0


class Fleet:
    def __init__(self, registry: Registry, cluster: Cluster, journal: Journal,
                 metrics: Metrics, policy: Callable[[], RestartPolicy],
                 clock: Callable[[], float], wake_after: Callable[[float], None],
                 released: Callable[[GangRecord], None],
                 changed: Callable[[GangRecord], None],
                 ending: Callable[[GangRecord], Awaitable[None]] | None = None,
                 spawn: Spawn = spawn_free,
                 settle_s: float = SETTLE_S):
        self._registry = registry
        self._changed = changed
        self._cluster = cluster
        self._journal = journal
        self._metrics = metrics
        self._policy = policy
        self._clock = clock
        self._wake_after = wake_after
        self._on_released = released
        self._ending = ending
        self._spawn = spawn
        self._drivers: dict[str, GangDriver] = {}
        # Each driven gang's view for a cycle (None: inside a job), in the drivers' order,
        # asked again only of the gangs whose record changed since (`Live.watch`) and of
        # the elastic ones: every cycle reads every held gang, and asking each of them
        # cost a backlog's worth of work per cycle. `_held`: the views, while none changed.
        self._views: dict[str, PlacedGang | None] = {}
        self._stale: set[str] = set()
        self._held: tuple[PlacedGang, ...] | None = None
        # Those of elastic gangs (a gang's spec never changes): every cycle asks about
        # them, and walking every driver for the few that are elastic cost a backlog's
        # worth of work per cycle.
        self._elastic: dict[str, GangDriver] = {}
        # For `settle_s` after a gang let go, the cluster's view may still show its
        # capacity used (on Ray, the GCS lags a placement group's removal by tens of
        # milliseconds): no gang is preempted on such a view (`settling`), it would stop
        # one for room that is already free. 0 where the view never lags (the simulator).
        self.settle_s = settle_s
        self._released_at = float("-inf")

    def __contains__(self, gang_id: object) -> bool:
        return gang_id in self._drivers

    def __iter__(self) -> Iterator[GangRecord]:
        """The gangs that hold (or are about to hold) capacity."""
        return (d.record for d in self._drivers.values())

    def driver(self, gang_id: str) -> GangDriver | None:
        return self._drivers.get(gang_id)

    def settling(self) -> bool:
        """A gang let go a moment ago: the cluster's view may not show it yet."""
        return self._clock() - self._released_at < self.settle_s

    def may_grow(self) -> bool:
        """Whether some running elastic gang is below its maximum (a cycle may grow it)."""
        return any(d.record.state is GangState.RUNNING
                   and d.record.size < d.record.spec.world_size
                   for d in self._elastic.values())

    def held(self) -> tuple[PlacedGang, ...]:
        """What raygang's book holds: not the gangs inside a job (the job books it)."""
        held, views = self._held, self._views
        if held is not None and not self._stale and not self._elastic:
            return held
        stale, asked = self._stale, list(self._elastic)
        while stale:  # popped one by one: a record may be changed from another thread
            asked.append(stale.pop())
        for gang_id in asked:
            driver = self._drivers.get(gang_id)
            if driver is not None:
                record = driver.record
                views[gang_id] = record.placed_view() if record.parent is None else None
        self._held = held = tuple(view for view in views.values() if view is not None)
        return held

    def admit(self, record: GangRecord, admission: Admission, now: float) -> None:
        """Start driving a gang the plan admitted, once the gangs whose capacity it takes
        (`admission.waits_for`) are gone."""
        self._metrics.admitted(record, now)
        record.nodes = admission.nodes
        record.members = []
        # Its own victims, and those of other gangs whose freed capacity it takes (the
        # same cycle's): until they are gone it neither reserves nor starts its timeout.
        waits = [task for g in admission.waits_for if (task := self._leaving(g)) is not None]
        run = self._cluster.new_run(record, admission.nodes,
                                    record.restarts + record.preemptions,
                                    record.members.append)
        driver = self._driver(record, run)
        driver.decide(Admitted(len(set(admission.nodes)), len(waits)))
        driver.start(waits)

    def _leaving(self, gone: str) -> asyncio.Future[Any] | None:
        """What an admission waits for: a gang's drive, or until what `<gang>/<member>`
        held is free (None once it is)."""
        gang_id, member = member_of(gone)
        driver = self._drivers.get(gang_id)
        if driver is None:
            return None
        return driver.freeing.get(member) if member else driver.task

    def grow(self, growth: Growth) -> None:
        """Add the members the plan grew a running elastic gang by."""
        driver = self._drivers.get(growth.gang_id)
        if driver is not None and driver.record.state is GangState.RUNNING \
                and driver.record.live.stopping is None:
            driver.grow(growth.members, growth.nodes)
            self._metrics.resized(driver.record, len(growth.members), 0)

    def note_growth(self, waits: Mapping[str, str]) -> None:
        """Each running elastic gang's reason not to grow, as of this cycle (none: it is at
        its maximum or grows)."""
        for driver in self._elastic.values():
            record = driver.record
            record.wait.grow_reason = waits.get(record.gang_id)

    def adopt(self, record: GangRecord, run: GangRun) -> None:
        """Take over a running gang a previous scheduler process started (recovery)."""
        driver = self._driver(record, run)
        driver.decide(Adopted())
        driver.start(adopted=True)

    def preempt(self, preemption: Preemption) -> None:
        """Tell the victim, give it its grace period, then stop it (it requeues)."""
        victim = self._registry.get(preemption.victim)
        preemptor = self._registry.get(preemption.preemptor)
        driver = self._drivers.get(victim.gang_id)
        if driver is None or victim.live.stopping is not None:
            return  # it ended on its own meanwhile
        if preemption.members:  # a shrink: only surplus members go, the gang runs on
            driver.shrink(preemption.members, preemption.reason)
            self._metrics.resized(victim, 0, len(preemption.members))
            return
        self._metrics.preempted(victim, preemptor, preemption)
        action = ACTIONS.get(preemption.action)  # its verb, as the action declares it
        verb = "preempted" if action is None else action.verb
        driver.preempt(f"{verb} by {preemptor.display}", preemption.reason)

    async def halt(self, gang_id: str) -> None:
        """Stop a gang's drive and wait until it holds nothing (cancellation)."""
        driver = self._drivers.get(gang_id)
        if driver is not None:
            await driver.halt()

    async def let_go(self, timeout_s: float = LET_GO_S) -> None:
        """Until every gang driven has let go of what it held (up to `timeout_s`). A gang's
        end is recorded before its teardown: a shutdown that killed the scheduler right
        after a result came back left that gang's group and members in the cluster."""
        tasks = [d.task for d in self._drivers.values() if d.task is not None]
        if tasks:
            await asyncio.wait(tasks, timeout=timeout_s)

    def _driver(self, record: GangRecord, run: GangRun) -> GangDriver:
        driver = GangDriver(record, run, cluster=self._cluster, journal=self._journal,
                            policy=self._policy, clock=self._clock,
                            wake_after=self._wake_after, released=self._released,
                            changed=self._changed, ending=self._ending, spawn=self._spawn,
                            settle_s=self.settle_s, restarted=self._metrics.restarted)
        self._drivers[record.gang_id] = driver
        self._views[record.gang_id] = None  # (a driver of the same id: its place is kept)
        self._stale.add(record.gang_id)
        record.live.watch = functools.partial(self._stale.add, record.gang_id)  # (never
        # replaced: the set is emptied in place)
        if record.spec.elastic:
            self._elastic[record.gang_id] = driver
        else:  # a driver of the same id before, elastic, replaced without a release
            self._elastic.pop(record.gang_id, None)
        return driver

    def _released(self, driver: GangDriver) -> None:
        if self._drivers.get(driver.record.gang_id) is driver:
            del self._drivers[driver.record.gang_id]
            self._elastic.pop(driver.record.gang_id, None)
            del self._views[driver.record.gang_id]
            self._stale.discard(driver.record.gang_id)
            self._held = None
            driver.record.live.watch = None
        self._released_at = self._clock()
        self._on_released(driver.record)

