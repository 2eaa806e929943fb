"""`RayCluster.until_free` with the GCS read replaced by a slow function (no Ray): however
many admissions wait at once, they share one read at a time; a GCS that does not answer
ends each wait at its timeout (False), and the read left running ends on its own."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable

from raygang.core.resources import Resources
from raygang.runtime.scheduler import cluster as cluster_module
from raygang.runtime.scheduler.cluster import RayCluster

ONE_GPU = [("n0", Resources(GPU=1))]


class FreeReads:
    """The GCS's free resources per node, each read taking `read_s` (in a thread)."""

    def __init__(self, read_s: float, free_after: int | None = None):
        self.read_s = read_s
        self.free_after = free_after  # reads that show n0 full before it shows free
        self.reads = 0
        self.at_once = 0
        self.most_at_once = 0
        self.release = threading.Event()
        self.release.set()
        self._lock = threading.Lock()

    def __call__(self) -> dict[str, dict[str, float]]:
        with self._lock:
            self.reads += 1
            self.at_once += 1
            self.most_at_once = max(self.most_at_once, self.at_once)
            number = self.reads
        try:
            assert self.release.wait(10)
            time.sleep(self.read_s)
        finally:
            with self._lock:
                self.at_once -= 1
        free = self.free_after is not None and number > self.free_after
        return {"n0": {"GPU": 4.0 if free else 0.0, "CPU": 8.0}}


def wait_at_once(monkeypatch, reads: FreeReads, waiters: int, timeout: float,
                 after: Callable[[RayCluster, list[bool]], Awaitable[None]] | None = None
                 ) -> list[bool]:
    """The answers of `waiters` admissions waiting at once (`until_free`, one GPU on n0,
    within `timeout`) on a RayCluster whose GCS reads are `reads`; then, on the same
    event loop, `after(cluster, answers)`."""
    monkeypatch.setattr(cluster_module, "available_resources_per_node", reads)

    async def scenario() -> list[bool]:
        cluster = RayCluster(serve_http_port=None)
        answers = list(await asyncio.gather(*(cluster.until_free(ONE_GPU, timeout=timeout)
                                              for _ in range(waiters))))
        if after is not None:
            await after(cluster, answers)
        return answers

    return asyncio.run(scenario())


def test_many_waiters_share_one_read_at_a_time_and_see_the_room_when_it_shows(monkeypatch):
    reads = FreeReads(read_s=0.02, free_after=5)
    answers = wait_at_once(monkeypatch, reads, waiters=50, timeout=5.0)
    # 50 waiters polling every 10 ms: one read each per poll would be 50 x 6 reads,
    # queued 6 at a time, and eat the waits' timeouts; shared, the room shows after the
    # 6th read, and every waiter sees it.
    assert answers == [True] * 50
    assert reads.most_at_once == 1
    assert reads.reads <= 8, reads.reads


def test_a_read_that_does_not_answer_ends_every_wait_at_its_timeout(monkeypatch):
    reads = FreeReads(read_s=0.0, free_after=0)
    reads.release.clear()  # the GCS is down

    async def after(cluster: RayCluster, answers: list[bool]) -> None:
        # Answered while the one read still hangs: each wait ended at its timeout, not
        # when the read did (it would have shown the room: True)
        assert answers == [False] * 20
        assert reads.at_once == 1 and not reads.release.is_set()
        assert reads.reads == 1  # nobody starts another read beside the hanging one
        reads.release.set()  # the GCS is back: the read ends on its own
        await asyncio.sleep(0.1)
        # A wait after it reads again (that read is old now) and sees the room
        assert await cluster.until_free(ONE_GPU, timeout=1.0)

    try:
        wait_at_once(monkeypatch, reads, waiters=20, timeout=0.2, after=after)
    finally:
        reads.release.set()
