"""A cluster that does not answer (Ray's GCS down or restarting) is no view, never an empty
cluster (no Ray; tests/integration/test_gcs_outage.py kills a real GCS).

While it does not answer, no cycle decides: nothing is admitted, preempted or taken for
dead, the gangs running stay RUNNING, the plane answers calls and says since when the
cluster is unreachable. The first cycle after it answers again decides as usual. A read
that blocks (as Ray's GCS reads do) runs in a thread within CLUSTER_READ_TIMEOUT_S
(control/sight.py); a probe finds an outage, and its end, while no cycle reads."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from raygang.control import sight
from raygang.control.errors import StoreError
from raygang.control.store import MemoryStore
from raygang.core.gang import GangState as S

from tests.control.harness import make_cluster, make_plane, run, submit, until, wait_for


def test_no_decision_while_the_cluster_does_not_answer_and_one_as_soon_as_it_does():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        running = await submit(plane, "running", "2xGPU=1", seconds=None)
        await wait_for(plane, running, S.RUNNING)

        cluster.outage = True
        outage_at = plane._clock()
        waiting = await submit(plane, "waiting", "GPU=2", seconds=None)
        urgent = await submit(plane, "urgent", "4xGPU=1", seconds=None, priority="inference")
        await asyncio.sleep(3.0)  # many resync intervals (0.05 s)
        assert (await plane.status(waiting)).state is S.PENDING
        assert (await plane.status(urgent)).state is S.PENDING  # and preempted no one
        status = await plane.status(running)
        assert status.state is S.RUNNING and status.preemptions == 0
        ping = await plane.ping()
        since, why = ping["unreachable"]
        assert outage_at <= since < outage_at + 0.2 and "does not answer" in why
        view = await plane.cluster()
        assert view.unreachable_since == since and view.nodes  # the last view, not empty
        # A cancel is a decision of the user's: it is carried out meanwhile.
        assert (await plane.cancel(waiting)).state is S.CANCELLED

        cluster.outage = False
        back_at = plane._clock()
        status = await wait_for(plane, urgent, S.RUNNING)
        assert status.started_at - back_at < 1.0
        assert (await plane.status(running)).preemptions == 1
        assert (await plane.ping())["unreachable"] is None
        assert (await plane.cluster()).unreachable_since is None
        await plane.shutdown()

    run(scenario)


def test_what_the_outage_left_of_gangs_no_longer_driven_is_removed_when_it_answers_again():
    """A teardown whose removal the GCS never answered (an outage longer than Ray's 60 s
    request timeout) leaves its parts in the cluster: they are listed once the cluster
    answers again and removed; the parts of gangs the scheduler still drives are kept, and
    so is what belongs to no gang it knows (another scheduler's, or made by hand)."""
    from raygang.core.resources import Resources

    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        running = await submit(plane, "running", "2xGPU=1", seconds=None)
        gone = await submit(plane, "gone", "GPU=1", seconds=0.1)
        await wait_for(plane, running, S.RUNNING)
        await wait_for(plane, gone, S.SUCCEEDED)
        assert (await plane.ping())["after_outage"] is None

        cluster.outage = True
        await asyncio.sleep(sight.PROBE_EVERY_S + 1.0)  # a probe finds it, nothing waits
        assert (await plane.ping())["unreachable"] is not None
        # What a given-up teardown left: a placement group's booking
        cluster.book(gone, [("n0", Resources(GPU=1))])
        cluster.book("not-raygangs", [("n0", Resources(GPU=1))])
        await asyncio.sleep(1.0)
        assert gone in cluster.booked  # no decision while it does not answer

        cluster.outage = False
        waiting = await submit(plane, "waiting", "GPU=1", seconds=None)
        await until(lambda: gone not in cluster.booked, sight.PROBE_EVERY_S + 1.0,
                    lambda: f"left: {sorted(cluster.booked)}")
        swept = (await plane.ping())["after_outage"]
        assert swept["removed"] == swept["removed_in_all"] == 1 and swept["outage_s"] > 0, swept
        assert running in cluster.booked  # driven: kept
        assert "not-raygangs" in cluster.booked  # no known gang's: kept
        assert (await plane.status(running)).state is S.RUNNING
        await wait_for(plane, waiting, S.RUNNING)  # the room it held is free again
        await plane.shutdown()

    run(scenario)


def test_a_start_the_outage_lost_is_given_up_and_requeued_with_no_restart_counted():
    """Ray loses an actor's creation when its GCS dies while scheduling it: the member never
    starts. A start under way when the cluster answers again, with members the run shows
    as never started LOST_START_S later, goes back in line (no restart counted) and
    starts again, instead of holding its capacity until its startup timeout fails it."""
    from raygang.control.outage import LOST_START_S

    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        cluster.losing_creations = True  # what starts now never does
        caught = await submit(plane, "caught", "2xGPU=1", seconds=None)
        await wait_for(plane, caught, S.STARTING)
        cluster.outage = True
        await asyncio.sleep(sight.PROBE_EVERY_S + 1.0)
        cluster.outage, cluster.losing_creations = False, False
        await asyncio.sleep(LOST_START_S - 1.0)
        assert (await plane.status(caught)).state is S.STARTING  # not before LOST_START_S
        status = await wait_for(plane, caught, S.RUNNING, timeout=10.0)
        assert status.restarts == 0, status
        requeued = [e.reason for e in status.events if e.to_state is S.PENDING][-1]
        assert "lost the start of member(s)" in requeued and "in an outage" in requeued
        await plane.shutdown()

    run(scenario)


def test_a_start_begun_just_after_an_outage_and_lost_is_given_up_too():
    """The GCS that just came back may lose creations while it takes its nodes back: a
    start begun within WATCH_S after the cluster answers again is watched as well."""
    from raygang.control.outage import LOST_START_S, WATCH_S

    async def scenario():
        cluster = make_cluster("n0: GPU=6")
        plane = make_plane(cluster)
        running = await submit(plane, "running", "2xGPU=1", seconds=None)
        await wait_for(plane, running, S.RUNNING)
        cluster.outage = True
        await asyncio.sleep(sight.PROBE_EVERY_S + 1.0)
        assert (await plane.ping())["unreachable"] is not None
        cluster.outage = False
        await asyncio.sleep(WATCH_S / 2)
        cluster.losing_creations = True
        late = await submit(plane, "late", "2xGPU=1", seconds=None)
        await wait_for(plane, late, S.STARTING)
        await asyncio.sleep(1.0)
        cluster.losing_creations = False
        status = await wait_for(plane, late, S.RUNNING, timeout=LOST_START_S + 10.0)
        assert status.restarts == 0, status
        requeued = [e.reason for e in status.events if e.to_state is S.PENDING][-1]
        assert "lost the start of member(s)" in requeued and "in an outage" in requeued
        # Past the window, a lost start is left to its startup timeout: no outage, no watch
        await asyncio.sleep(WATCH_S)
        cluster.losing_creations = True
        later = await submit(plane, "later", "2xGPU=1", seconds=None)
        await wait_for(plane, later, S.STARTING)
        await asyncio.sleep(LOST_START_S + 5.0)
        assert (await plane.status(later)).state is S.STARTING
        await plane.shutdown()

    run(scenario, virtual_s=240.0)


def test_a_slow_start_after_an_outage_is_left_alone():
    """Members that started (the run shows none lost) are never taken for lost."""
    from raygang.control.outage import LOST_START_S

    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        slow = await submit(plane, "slow", "2xGPU=1", seconds=None, start_s=LOST_START_S * 2)
        await wait_for(plane, slow, S.STARTING)
        cluster.outage = True
        await asyncio.sleep(sight.PROBE_EVERY_S + 1.0)
        cluster.outage = False
        status = await wait_for(plane, slow, S.RUNNING, timeout=LOST_START_S * 3)
        assert [e.to_state for e in status.events].count(S.PENDING) == 1, status
        await plane.shutdown()

    run(scenario)


def test_a_blocking_read_runs_in_a_thread_and_the_plane_answers_meanwhile(monkeypatch):
    """In real time (the virtual-time loop runs threads inline), with a short timeout."""
    monkeypatch.setattr(sight, "CLUSTER_READ_TIMEOUT_S", 0.3)

    async def scenario():
        cluster = make_cluster("n0: GPU=4", seed=None)
        cluster.calls_block = True
        plane = make_plane(cluster)
        first = await submit(plane, "first", "GPU=1", seconds=None)
        await wait_for(plane, first, S.RUNNING)

        answers = threading.Event()  # the GCS: down until set
        reads: list[int] = []
        observe = cluster.observe

        def blocking_observe(held, draining):
            reads.append(1)
            answers.wait(30)
            return observe(held, draining)

        cluster.observe = blocking_observe
        await asyncio.sleep(0.2)  # the last view grows old: the next submission reads
        started = time.monotonic()
        waiting = await submit(plane, "waiting", "GPU=1", seconds=None)
        assert time.monotonic() - started < 1.0  # accepted on the last view, not blocked
        await asyncio.sleep(1.0)
        # The loop was not blocked: the plane answers at once, the gang waits, and one
        # read hangs (not a thread per cycle).
        started = time.monotonic()
        assert (await plane.status(waiting)).state is S.PENDING
        assert (await plane.ping())["unreachable"] is not None
        assert time.monotonic() - started < 0.1
        assert len(reads) == 1

        answers.set()  # the GCS is back: the hanging read returns and wakes the loop
        await wait_for(plane, waiting, S.RUNNING)
        assert (await plane.ping())["unreachable"] is None
        await plane.shutdown()
        await plane.close(1.0)

    asyncio.run(asyncio.wait_for(scenario(), 20))


def test_a_probe_finds_an_outage_and_its_end_while_nothing_waits():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        running = await submit(plane, "running", "GPU=1", seconds=None)
        await wait_for(plane, running, S.RUNNING)  # nothing waits: no cycle reads
        cluster.outage = True
        await asyncio.sleep(sight.PROBE_EVERY_S + 1.0)
        unreachable = (await plane.ping())["unreachable"]
        assert unreachable is not None and "small read" in unreachable[1]
        cluster.outage = False
        await asyncio.sleep(sight.PROBE_EVERY_S + 1.0)
        assert (await plane.ping())["unreachable"] is None
        assert (await plane.status(running)).state is S.RUNNING
        await plane.shutdown()

    run(scenario)


class OutageStore(MemoryStore):
    """The GCS's key-value store, down while `down` (a write fails as a timed-out one)."""

    def __init__(self):
        super().__init__()
        self.down = False

    async def put(self, table, key, value):
        if self.down:
            raise TimeoutError("the GCS did not answer within 30 s")
        await super().put(table, key, value)


def test_a_submission_the_store_cannot_take_is_refused_saying_why_and_nothing_is_kept():
    async def scenario():
        cluster, store = make_cluster("n0: GPU=4"), OutageStore()
        plane = make_plane(cluster, store)
        cluster.outage = store.down = True
        await asyncio.sleep(sight.PROBE_EVERY_S + 1.0)  # the probe has seen it
        with pytest.raises(StoreError) as refused:
            await submit(plane, "during", "GPU=1", seconds=None)
        assert "the submission was not accepted" in str(refused.value)
        assert "Ray's GCS does not answer" in str(refused.value)
        assert [r.spec.name for r in plane.registry] == []  # nothing kept
        cluster.outage = store.down = False
        await asyncio.sleep(sight.PROBE_EVERY_S + 1.0)
        after = await submit(plane, "after", "GPU=1", seconds=None)
        await wait_for(plane, after, S.RUNNING)
        await plane.shutdown()

    run(scenario)


def test_reads_under_way_are_shared_and_a_slow_healthy_cluster_is_never_unreachable():
    """In real time: each read takes 0.2 s; a cycle and many views at once share reads
    instead of taking the one under way for an outage (seen on Ray: the status page's
    polls beside a cycle made the scheduler skip cycles)."""
    async def scenario():
        cluster = make_cluster("n0: GPU=4", seed=None)
        cluster.calls_block = True
        observe, reads = cluster.observe, []

        def slow_observe(held, draining):
            reads.append(1)
            time.sleep(0.2)
            return observe(held, draining)

        cluster.observe = slow_observe
        plane = make_plane(cluster)
        lost = []
        plane.loop.sight.lost = lost.append
        gangs = [await submit(plane, f"g{i}", "GPU=1", seconds=0.05) for i in range(3)]
        views = [plane.cluster() for _ in range(4)] + [plane.queues() for _ in range(4)]
        answers = await asyncio.gather(*views)
        assert len(answers) == 8 and not lost
        for gang_id in gangs:
            await wait_for(plane, gang_id, S.SUCCEEDED)
        assert not lost and len(reads) < 8 + 3 * 4
        await plane.shutdown()
        await plane.close(1.0)

    asyncio.run(asyncio.wait_for(scenario(), 30))


def test_no_resize_while_the_cluster_does_not_answer_and_both_ways_after():
    """An elastic gang neither grows into room freed during an outage nor is shrunk for an
    urgent gang that arrives in it; both happen once the cluster answers again."""
    from tests.control.test_elastic_runs import elastic, size_of

    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        blocker = await submit(plane, "blocker", "2xGPU=1", seconds=None)
        await wait_for(plane, blocker, S.RUNNING)
        e = await elastic(plane, "e", 1, 4)
        await size_of(plane, e, 2)

        cluster.outage = True
        await plane.cancel(blocker)  # the user's decision: carried out, its room freed
        await asyncio.sleep(2.0)
        status = await plane.status(e)
        assert status.state is S.RUNNING and len(status.members) == 2  # no growth
        cluster.outage = False
        await size_of(plane, e, 4)

        cluster.outage = True
        urgent = await submit(plane, "urgent", "2xGPU=1", priority="inference", seconds=None)
        await asyncio.sleep(2.0)
        assert (await plane.status(urgent)).state is S.PENDING
        status = await plane.status(e)
        assert len(status.members) == 4 and not any(
            "shrinking" in ev.reason for ev in status.events)
        cluster.outage = False
        await wait_for(plane, urgent, S.RUNNING)
        await size_of(plane, e, 2)
        status = await plane.status(e)
        assert status.state is S.RUNNING and status.preemptions == 0
        for gang in (urgent, e):
            await plane.cancel(gang)
        await plane.shutdown()

    run(scenario)
