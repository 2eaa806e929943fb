"""`RayCluster.until_free` with the GCS read replaced by a slow function (no Ray): however
many admissions wait at once, they share one read at a time; a GCS that does not answer
ends each wait at its timeout (False), and the read left running ends on its own."""

from __future__ import annotations

import asyncio
import threading
import time

from raygang.core.resources import Resources
from raygang.runtime.scheduler import cluster as cluster_module
from raygang.runtime.scheduler.cluster import RayCluster


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


def test_many_waiters_share_one_read_at_a_time_and_see_the_room_when_it_shows(monkeypatch):
    reads = FreeReads(read_s=0.02, free_after=5)
    monkeypatch.setattr(cluster_module, "available_resources_per_node", reads)

    async def scenario():
        cluster = RayCluster(serve_http_port=None)
        waits = [cluster.until_free([("n0", Resources(GPU=1))], timeout=5.0)
                 for _ in range(50)]
        started = time.monotonic()
        assert all(await asyncio.gather(*waits))
        return time.monotonic() - started

    took = asyncio.run(scenario())
    # 50 waiters polling every 10 ms: one read each per poll would be 50 x 6 reads,
    # queued 6 at a time; shared, the room shows after the 6th read.
    assert reads.most_at_once == 1
    assert reads.reads <= 8, reads.reads
    assert took < 2.0, took


def test_a_read_that_does_not_answer_ends_every_wait_at_its_timeout(monkeypatch):
    reads = FreeReads(read_s=0.0, free_after=0)
    reads.release.clear()  # the GCS is down
    monkeypatch.setattr(cluster_module, "available_resources_per_node", reads)

    async def scenario():
        cluster = RayCluster(serve_http_port=None)
        waits = [cluster.until_free([("n0", Resources(GPU=1))], timeout=0.2)
                 for _ in range(20)]
        started = time.monotonic()
        answers = await asyncio.gather(*waits)
        took = time.monotonic() - started
        assert answers == [False] * 20 and took < 1.0, (answers, took)
        assert reads.reads == 1  # the one read, still hanging: nobody starts another
        reads.release.set()  # the GCS is back: the read ends on its own
        await asyncio.sleep(0.1)
        # A wait after it reads again (that read is old now) and sees the room
        assert await cluster.until_free([("n0", Resources(GPU=1))], timeout=1.0)

    try:
        asyncio.run(scenario())
    finally:
        reads.release.set()
