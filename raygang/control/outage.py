"""What the scheduler does once the cluster answers again after an outage (Ray's GCS down
or restarting; `sight.ClusterView` tells): it looks, instead of awaiting events the
outage may have lost.

- **Leftovers** (`sweep`): what raygang left in the cluster of gangs it no longer drives
  is listed and removed. A teardown during the outage waits for the GCS, but one whose
  removal was given up on (an outage longer than Ray's request timeout, 60 s) left its
  parts there, and so did a creation the GCS finished after its caller gave up.
- **Lost starts** (`watch_starts`): a start under way when the cluster answers again, or
  begun within WATCH_S after, with members the run shows as never started LOST_START_S
  into it (`GangRun.lost_members`: on Ray, a member whose creation its GCS lost while
  scheduling it), goes back in line at once, with no restart counted. Left alone, it
  would hold its capacity until its startup timeout (10 min by default), then fail. The
  same watch follows a restart of the scheduler's own process with gangs to recover: a
  head replaced (KubeRay's head pod deleted) restarts it with no outage it could see, and
  its first starts, made while the new GCS takes its nodes back, were seen lost there
  (the chaos soak, tests/e2e/chaos_scenario.py: members PENDING_CREATION with no process
  for minutes, their group CREATED).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from raygang.control.driver import GangDriver
from raygang.control.fleet import Fleet
from raygang.control.ports import Cluster
from raygang.control.registry import Registry
from raygang.core.gang import GangState

log = logging.getLogger(__name__)

# How long after an outage a start may take before members the cluster shows as never
# started are taken for lost (a worker process starts in 1-3 s here, more under load).
LOST_START_S = 30.0
WATCH_S = 60.0  # how long after the cluster answers again new starts are watched too
CHECK_EVERY_S = 2.0
STARTING = (GangState.ADMITTED, GangState.RESERVED, GangState.STARTING)


class AfterOutage:
    def __init__(self, cluster: Cluster, registry: Registry, fleet: Fleet,
                 clock: Callable[[], float],
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]]):
        self._cluster = cluster
        self._registry = registry
        self._fleet = fleet
        self._clock = clock
        self._spawn = spawn
        # The last look for leftovers: {"at", "outage_s", "removed", "removed_in_all"} (the
        # plane's ping). In all, too: a later false outage (a probe slow on a loaded
        # machine) looks again, finds nothing, and would hide what the real one removed
        self.last: dict[str, Any] | None = None
        self._removed_in_all = 0
        self._watch_until = float("-inf")
        self._when = ""
        self._watcher: asyncio.Task[Any] | None = None

    def answers_again(self, lasted: float) -> None:
        """The cluster answers again after `lasted` seconds without."""
        self._spawn(self.sweep(lasted))
        self.watch_starts("in an outage")

    def watch_starts(self, when: str) -> None:
        """Watch the starts under way now and those begun in the next WATCH_S for members
        lost `when` (words for the requeue's reason)."""
        self._watch_until = max(self._watch_until, self._clock() + WATCH_S)
        self._when = when
        if self._watcher is None or self._watcher.done():
            self._watcher = self._spawn(self._watch())

    async def _watch(self) -> None:
        """Each start seen is looked at once, LOST_START_S after it was first seen; the
        watch ends once the window has closed and every start seen was looked at."""
        seen: dict[str, tuple[GangDriver, float]] = {}  # gang id -> (driver, first seen at)
        while True:
            now = self._clock()
            if now <= self._watch_until:
                for record in self._fleet:
                    driver = self._fleet.driver(record.gang_id)
                    known = seen.get(record.gang_id)
                    if driver is not None and record.state in STARTING \
                            and (known is None or known[0] is not driver):
                        seen[record.gang_id] = (driver, now)  # a new start (or attempt)
            due = [g for g, (_, at) in seen.items() if now - at >= LOST_START_S]
            for gang_id in due:
                await self._give_up_if_lost(gang_id, seen.pop(gang_id)[0])
            if not seen and now > self._watch_until:
                return
            await asyncio.sleep(CHECK_EVERY_S)

    async def _give_up_if_lost(self, gang_id: str, driver: GangDriver) -> None:
        if self._fleet.driver(gang_id) is not driver or driver.record.state not in STARTING:
            return  # started, ended, or another attempt (watched on its own)
        try:
            lost = await asyncio.to_thread(driver.run.lost_members)
        except Exception:  # noqa: BLE001 - cannot tell: no decision
            log.warning("could not read %s's members", gang_id, exc_info=True)
            return
        if lost and self._fleet.driver(gang_id) is driver:
            driver.give_up_start(
                f"the cluster lost the start of member(s) {', '.join(lost)} {self._when} "
                f"(not started {LOST_START_S:g}s into the start)")

    async def sweep(self, lasted: float) -> int:
        """Remove the parts (member actors, placement groups) of known gangs no longer
        driven; how many. Kept: every gang with a drive (admitted, starting, running or tearing
        down: a group being prepared must not be removed, ray-project/ray #64693). The list
        is read first and the gangs to keep after it, on the loop: one admitted meanwhile
        has nothing in the list yet. Never raises."""
        try:
            found = await asyncio.to_thread(self._cluster.leftovers, self._registry)
            keep = {record.gang_id for record in self._fleet}
            # Only known gangs' parts: a `raygang-` name it cannot place may be another
            # scheduler's, or made by hand, and an outage is no proof that it is left over
            removed = await asyncio.to_thread(found.orphans, keep, unknown=False)
        except Exception:  # noqa: BLE001 - the next outage's end looks again
            log.warning("looking for leftovers after the outage failed", exc_info=True)
            return 0
        self._removed_in_all += removed
        self.last = {"at": self._clock(), "outage_s": round(lasted, 1), "removed": removed,
                     "removed_in_all": self._removed_in_all}
        if removed:
            log.warning("after an outage of %.1f s: removed %d parts of gangs raygang no "
                        "longer drives", lasted, removed)
        return removed
