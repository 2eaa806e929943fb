"""Recovery meets the cluster off the event loop (no Ray; control/recovery.py).

On Ray, what recovery asks of the cluster (listing the `raygang-*` actors and placement
groups left, adopting a gang, removing parts) is GCS calls, which wait while the GCS is
down. Where the cluster says its calls may block (`Cluster.calls_block`), each runs in
a thread within a timeout of its own: the plane answers meanwhile (`ping`, not ready). A
call that fails or does not answer makes the whole rebuild try again: no gang is taken
for dead, and nothing of a try cut short is left half-done in the book.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from raygang.control import plane as plane_module
from raygang.control import recovery
from raygang.core.gang import GangState as S
from raygang.core.resources import Resources

from tests.control import harness
from tests.control.harness import moves, submit, wait_for
from tests.control.test_recovery import crash_and_restart, make_cluster

ADOPTED = ("RUNNING", "adopted by the restarted scheduler: members and placement group kept")


class FailingOnce:
    """Makes the cluster's `call` ("leftovers", "adopt", "clear" or "orphans") raise the
    first time it is made, as a GCS call does when the GCS does not answer."""

    def __init__(self, cluster, call: str):
        self.cluster, self.call, self.failed = cluster, call, 0
        self._leftovers, self._adopt = cluster.leftovers, cluster.adopt
        cluster.leftovers, cluster.adopt = self.leftovers, self.adopt

    def fail(self, call: str) -> None:
        if call == self.call and not self.failed:
            self.failed += 1
            raise TimeoutError(f"the GCS did not answer ({call})")

    def leftovers(self, known):
        self.fail("leftovers")
        found = self._leftovers(known)
        clear, orphans = found.clear, found.orphans

        def failing_clear(gang_id):
            self.fail("clear")
            return clear(gang_id)

        def failing_orphans(unfinished, unknown=True):
            self.fail("orphans")
            return orphans(unfinished, unknown)

        found.clear, found.orphans = failing_clear, failing_orphans
        return found

    def adopt(self, record, leftovers):
        self.fail("adopt")
        return self._adopt(record, leftovers)


@pytest.mark.parametrize("blocks", [False, True], ids=["in-place", "off-the-loop"])
@pytest.mark.parametrize("call", ["leftovers", "adopt", "clear", "orphans"])
def test_a_cluster_call_that_fails_makes_recovery_try_again_and_decides_nothing(call, blocks):
    """A starting gang (torn down and requeued), then a running one (adopted), then an
    orphan: whichever call fails first, the retry ends as one clean try would (each gang
    restored once, requeued once, adopted once, the orphan removed), and the running gang
    is never taken for dead."""
    cluster = make_cluster("n0: GPU=4 CPU=8")

    async def before(plane):
        ids = {"starting": await submit(plane, "slow", "GPU=1", seconds=0, start_s=30)}
        await wait_for(plane, ids["starting"], S.STARTING)
        ids["running"] = await submit(plane, "svc", "2xGPU=1", seconds=None)
        await wait_for(plane, ids["running"], S.RUNNING)
        await asyncio.sleep(0.05)  # the writer task writes the latest states
        return ids

    async def after(plane, ids):
        cluster.calls_block = blocks
        failing = FailingOnce(cluster, call)
        cluster.book("ghost-0000", [("n0", Resources(CPU=1))])  # of no gang: an orphan
        await plane.ready()
        assert failing.failed == 1
        assert plane.loop.last_error.startswith("recovery: TimeoutError")
        found = plane.recovery
        assert (found["gangs"], found["adopted"], found["requeued"]) == (2, 1, 1), found
        assert "ghost-0000" not in cluster.booked
        assert len(plane.registry) == 2
        running = await plane.status(ids["running"])
        assert running.state is S.RUNNING and running.restarts == 0
        assert moves(running).count(ADOPTED) == 1 and moves(running)[-1] == ADOPTED
        requeues = [m for m in moves(await plane.status(ids["starting"]))
                    if m[1].startswith("requeued: the scheduler restarted")]
        assert len(requeues) == 1, requeues
        await plane.shutdown()

    crash_and_restart(cluster, before, after)


def test_a_cluster_that_does_not_answer_holds_recovery_not_the_loop(monkeypatch):
    """In real time (the virtual-time loop runs threads inline). The leftovers' read
    hangs (a GCS down) past recovery's timeout: the plane answers `ping` at once, not
    ready, saying why; recovery tries again, waiting for the hanging read rather than
    starting another beside it; once the read returns, the running gang is adopted."""
    monkeypatch.setattr(recovery, "CALL_TIMEOUT_S", 0.3)
    monkeypatch.setattr(plane_module, "STORE_RETRY_S", 0.1)
    cluster = harness.make_cluster("n0: GPU=4", seed=None)  # the running loop's clock
    answers = threading.Event()  # the GCS: down until set
    reads: list[float] = []

    async def before(plane):
        ids = {"running": await submit(plane, "svc", "2xGPU=1", seconds=None)}
        await wait_for(plane, ids["running"], S.RUNNING)
        await asyncio.sleep(0.05)  # the writer task writes the latest states
        return ids

    async def after(plane, ids):
        cluster.calls_block = True
        leftovers = cluster.leftovers

        def hanging_leftovers(known):
            reads.append(time.monotonic())
            answers.wait(30)
            return leftovers(known)

        cluster.leftovers = hanging_leftovers
        first = await plane.ping()  # starts recovery
        assert first["ready"] is False
        await asyncio.sleep(1.0)  # three tries, at least, time out meanwhile
        started = time.monotonic()
        pinged = await plane.ping()
        assert time.monotonic() - started < 0.5  # the loop was not held
        assert pinged["ready"] is False
        assert "ClusterUnreachable" in pinged["last_cycle_error"]
        assert len(reads) == 1  # one hanging read, not one more per try
        answers.set()
        await plane.ready()
        assert len(reads) == 2
        assert plane.recovery["adopted"] == 1 and plane.recovery["requeued"] == 0
        status = await plane.status(ids["running"])
        assert status.state is S.RUNNING and moves(status)[-1] == ADOPTED
        await plane.shutdown()

    try:
        crash_and_restart(cluster, before, after, new_loop=asyncio.new_event_loop)
    finally:
        answers.set()
