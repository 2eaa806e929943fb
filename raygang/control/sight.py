"""What the scheduler sees of the cluster, and whether the cluster answers at all.

A cluster that does not answer (Ray's GCS down or restarting) is no view, never an empty
one: the loop then decides nothing, and nobody is admitted, preempted or taken for dead.
Where reading the cluster may block (`Cluster.calls_block`: Ray's GCS reads wait while
the GCS is down, up to its reconnect timeout of 60 s), the read runs in a thread within
CLUSTER_READ_TIMEOUT_S, so that the event loop goes on answering calls; callers that come
while a read is under way share it, and one that has not returned in time is not started
again (it wakes the loop when it returns).

`unreachable` says since when and why. Cycles read the cluster only while gangs wait, so
the cluster is also asked a small question (`Cluster.answers`) when nothing has read it
for PROBE_EVERY_S: an outage shows while nothing waits, and its end while no cycle runs.
When it answers again, `back` is told (the loop then looks for what the outage may have
left behind and what it may have lost: `control/outage.py`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Collection, Coroutine
from typing import Any

from raygang.control.errors import ClusterUnreachable
from raygang.control.fleet import Fleet
from raygang.control.ports import Cluster
from raygang.control.tasks import spawn_free, wait_within
from raygang.core.snapshot import ClusterSnapshot, PlacedGang

log = logging.getLogger(__name__)

# A cluster read that takes longer is taken for an outage (a healthy GCS answers in
# milliseconds; on a loaded 2-core machine, well under a second).
CLUSTER_READ_TIMEOUT_S = 5.0
PROBE_EVERY_S = 5.0  # how often the cluster is asked whether it answers
PROBE_TIMEOUT_S = 2.0


class ClusterView:
    def __init__(self, cluster: Cluster, fleet: Fleet, clock: Callable[[], float],
                 draining: Callable[[], Collection[str]], wake: Callable[[], None],
                 spawn: Callable[[Coroutine[Any, Any, Any]], asyncio.Task[Any]] = spawn_free,
                 back: Callable[[float], None] = lambda lasted: None):
        """`back`: told how long an outage lasted, once the cluster answers again."""
        self._cluster = cluster
        self._back = back
        self._fleet = fleet
        self._clock = clock
        self._draining = draining
        self._wake = wake
        self._spawn = spawn
        self.observed: tuple[float, ClusterSnapshot] | None = None  # (when, the last view)
        # (since when, why) while the cluster does not answer; None when it does.
        self.unreachable: tuple[float, str] | None = None
        self._reading: asyncio.Future[ClusterSnapshot] | None = None  # a read in a thread
        self._reading_since = 0.0  # when it began (the event loop's clock)
        # What it was asked with: the gangs held then, and the nodes being drained
        self._asked: tuple[tuple[PlacedGang, ...], frozenset[str]] = ((), frozenset())
        self._probing: asyncio.Task[None] | None = None
        self._probed_at = float("-inf")

    def observe(self) -> ClusterSnapshot:
        """A read now, in this thread (tests and the simulator drive cycles by hand)."""
        return self._cluster.observe(self._fleet.held(), self._draining())

    async def observe_off_loop(self) -> ClusterSnapshot | None:
        """A read for a cycle, or None while the cluster does not answer."""
        try:
            if not self._cluster.calls_block:
                snapshot = self.observe()  # in place: a cycle's interleaving is kept
            else:
                snapshot = await self._read_in_thread()
        except ClusterUnreachable as error:
            self.lost(str(error))
            return None
        self.answered()
        self._probed_at = self._clock()  # a read answered: no probe due for a while
        return snapshot

    async def _read_in_thread(self) -> ClusterSnapshot:
        """A read in a thread; a caller that comes while one is under way (a cycle and the
        status page's views at once) shares it, within what is left of its timeout, if it
        was asked with what raygang holds now. One asked before a gang was admitted (a
        view's, begun while the last cycle decided) would show that gang's capacity free
        before Ray shows its group: the caller waits for it (the one read a cluster that
        hangs gets), then reads anew."""
        asked = self._asking()
        reading = self._reading
        if reading is not None and not reading.done() and self._asked != asked:
            await self._within(reading)
            asked, reading = self._asking(), self._reading  # (another may have begun one)
        if reading is None or reading.done() or self._asked != asked:
            reading = self._reading = asyncio.ensure_future(
                asyncio.to_thread(self._cluster.observe, *asked))
            reading.add_done_callback(self._read_returned)
            self._reading_since, self._asked = asyncio.get_running_loop().time(), asked
        await self._within(reading)
        return reading.result()

    def _asking(self) -> tuple[tuple[PlacedGang, ...], frozenset[str]]:
        return tuple(self._fleet.held()), frozenset(self._draining())

    async def _within(self, reading: asyncio.Future[ClusterSnapshot]) -> None:
        """Until `reading` returns, within what is left of its timeout."""
        left = self._reading_since + CLUSTER_READ_TIMEOUT_S - asyncio.get_running_loop().time()
        done, _ = (await wait_within([asyncio.shield(reading)], left) if left > 0
                   else (set(), set()))
        if not done:
            raise ClusterUnreachable(
                f"the cluster did not answer within {CLUSTER_READ_TIMEOUT_S:g} s")

    def _read_returned(self, reading: asyncio.Future[ClusterSnapshot]) -> None:
        if not reading.cancelled():
            reading.exception()  # retrieved here: a late one is only a sign of life
        if self.unreachable is not None:
            self._wake()  # the cluster may answer again: look at once

    def lost(self, why: str) -> None:
        if self.unreachable is None:
            log.warning("the cluster does not answer: no scheduling decision until it "
                        "does (%s)", why)
            self.unreachable = (self._clock(), why)

    def answered(self) -> None:
        if self.unreachable is not None:
            lasted = self._clock() - self.unreachable[0]
            log.warning("the cluster answers again (it did not for %.1f s)", lasted)
            self.unreachable = None
            self._wake()
            self._back(lasted)

    def probe(self) -> None:
        """Ask the cluster whether it answers, if that is due (see the module's docstring);
        the question is a task of its own: it never holds the loop up."""
        if self._cluster.always_answers:
            return
        if self._probing is not None and not self._probing.done():
            return
        if self._clock() - self._probed_at < PROBE_EVERY_S:
            return
        self._probed_at = self._clock()
        self._probing = self._spawn(self._probe())

    async def _probe(self) -> None:
        if await self._cluster.answers(PROBE_TIMEOUT_S):
            self.answered()
        else:
            self.lost(f"a small read did not answer within {PROBE_TIMEOUT_S:g} s")

    async def view(self, max_age: float) -> ClusterSnapshot:
        """The last view if younger than `max_age`, else one read now (off the loop
        where a read may block). While the cluster does not answer: the last view it
        gave (the nodes' totals change slowly)."""
        if self.observed and (self.unreachable is not None
                              or self._clock() - self.observed[0] < max_age):
            return self.observed[1]
        snapshot = await self.observe_off_loop()
        if snapshot is None:
            if self.observed is None:
                raise ClusterUnreachable("the cluster has not answered yet")
            return self.observed[1]
        self.observed = (self._clock(), snapshot)
        return snapshot

    def with_held(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """`snapshot` with what raygang holds now (usage must be current)."""
        return dataclasses.replace(snapshot, placed=tuple(self._fleet.held()))
