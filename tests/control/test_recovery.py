"""A restarted scheduler rebuilds its book from the store (no Ray).

The first control plane runs in an event loop of its own; its "process dies" when that
loop is never run again (nothing of it is torn down, as in a crash). A second plane on
the same store and the same in-memory cluster then recovers.
"""

from __future__ import annotations

import asyncio

import pytest

from raygang.control.memory import MemoryProgram
from raygang.control.program import RoleProgram
from raygang.control.store import MemoryStore
from raygang.core.gang import GangState as S
from raygang.core.resources import Resources

from raygang.control.virtual import VirtualClock, VirtualTimeLoop

from tests.control import harness
from tests.control.harness import make_plane, moves, submit, wait_for
from tests.unit.builders import spec


def crash_and_restart(cluster, before, after, after_s: float = 30, new_loop=None):
    """Run `before(plane)` on a first plane, abandon it, run `after(plane)` on a second;
    both loops in the same virtual time as the cluster (or made by `new_loop()`)."""
    new_loop = new_loop or (lambda: VirtualTimeLoop(cluster.clock, wall_limit_s=30))
    store = MemoryStore()
    first_loop = new_loop()
    try:
        first = make_plane_in(first_loop, cluster, store)
        ids = first_loop.run_until_complete(asyncio.wait_for(before(first), 30))
        second_loop = new_loop()
        try:
            second = make_plane_in(second_loop, cluster, store)
            second_loop.run_until_complete(asyncio.wait_for(after(second, ids), after_s))
            stuck = second_loop.run_until_complete(second.close())
            assert not stuck, f"tasks that did not end when cancelled: {stuck}"
        finally:
            second_loop.close()
    finally:  # only now may the dead process's tasks end (the test is over)
        tasks = asyncio.all_tasks(first_loop)
        for task in tasks:
            task.cancel()
        first_loop.run_until_complete(asyncio.wait(tasks, timeout=10))
        first_loop.run_until_complete(asyncio.sleep(0.05))  # what their ends started
        first_loop.close()


def make_plane_in(loop, cluster, store):
    async def made():
        return make_plane(cluster, store)
    return loop.run_until_complete(made())


def make_cluster(*lines):
    return harness.make_cluster(*lines, seed=0, clock=VirtualClock())


@pytest.mark.parametrize("blocks", [False, True], ids=["in-place", "off-the-loop"])
def test_a_restarted_scheduler_adopts_requeues_and_keeps_its_queue(blocks):
    """The same whether recovery's cluster calls are made in place or, as on Ray, in a
    thread (`Cluster.calls_block`; the virtual-time loop runs threads inline)."""
    cluster = make_cluster("n0: GPU=4 CPU=8")

    async def before(plane):
        ids = {
            "service": await submit(plane, "service", "2xGPU=1", seconds=None),
            "job": await submit(plane, "job", "GPU=1", seconds=0.5, result=7),
        }
        for gang_id in ids.values():
            await wait_for(plane, gang_id, S.RUNNING)
        ids["starting"] = await submit(plane, "slow", "GPU=1", seconds=0, start_s=30)
        await wait_for(plane, ids["starting"], S.STARTING)
        ids["pending"] = await submit(plane, "big", "4xGPU=1", seconds=0, key="k-1")
        await wait_for(plane, ids["pending"], S.PENDING)
        ids["pending-seq"] = plane.registry.get(ids["pending"]).seq
        cluster.book("ghost-0000", [("n0", Resources(CPU=1))])  # of no gang: an orphan
        await asyncio.sleep(0.05)  # the writer task writes the latest states
        return ids

    async def after(plane, ids):
        cluster.calls_block = blocks
        await plane.ready()
        found = plane.recovery
        assert (found["gangs"], found["adopted"], found["requeued"], found["pending"]) == \
            (4, 2, 1, 1)
        assert found["orphans_removed"] == 1 and "ghost-0000" not in cluster.booked
        service = await plane.status(ids["service"])
        assert service.state is S.RUNNING
        assert moves(service)[-1] == ("RUNNING", "adopted by the restarted scheduler: members "
                                                 "and placement group kept")
        job = await plane.wait(ids["job"], timeout=5)  # its run went on: it ends on time
        assert job.state is S.SUCCEEDED and await plane.results(ids["job"]) == [7]
        assert job.restarts == 0 and job.preemptions == 0
        starting = await plane.status(ids["starting"])
        assert ("PENDING", "requeued: the scheduler restarted while the gang was STARTING") \
            in moves(starting)
        assert starting.restarts == 0 and starting.preemptions == 0
        pending = plane.registry.get(ids["pending"])
        assert pending.seq == ids["pending-seq"] and pending.state is not S.CANCELLED
        # The idempotency key came back: a retried submission gets the same gang.
        assert await submit(plane, "big", "4xGPU=1", seconds=0, key="k-1") == ids["pending"]
        fresh = await submit(plane, "fresh", "CPU=1", seconds=0)  # after every gang read back
        assert plane.registry.get(fresh).seq > ids["pending-seq"]
        await plane.shutdown()

    crash_and_restart(cluster, before, after)


def test_a_cancellation_written_but_not_carried_out_is_carried_out():
    cluster = make_cluster("n0: GPU=2")

    async def before(plane):
        gang_id = await submit(plane, "svc", "2xGPU=1", seconds=None)
        await wait_for(plane, gang_id, S.RUNNING)
        record = plane.registry.get(gang_id)
        record.cancel_reason = "cancelled by user"  # what cancel() writes first...
        await plane.journal.write(record)  # ...then the process dies
        return {"svc": gang_id}

    async def after(plane, ids):
        await plane.ready()
        status = await plane.status(ids["svc"])
        assert status.state is S.CANCELLED and status.reason == "cancelled by user"
        assert moves(status)[-2:] == [
            ("PENDING", "scheduler restarted; carrying out the cancellation"),
            ("CANCELLED", "cancelled by user")]
        assert plane.recovery["cancelled"] == 1 and not cluster.booked
        await plane.shutdown()

    crash_and_restart(cluster, before, after)


def test_gangs_inside_a_job_lost_while_the_scheduler_was_down_are_cancelled():
    """The job's run is gone when the scheduler comes back (it is requeued); the gang its
    driver had started inside it still runs, and is cancelled rather than left running
    in capacity its job no longer holds."""
    cluster = make_cluster("n0: GPU=2")

    async def before(plane):
        job = await submit(plane, "job", "2xGPU=1", seconds=None)
        await wait_for(plane, job, S.RUNNING)
        cluster.open_budget(job)
        s = spec("inner", "1xGPU=1", "PACK")
        inner = await plane.submit(s, {"r0": RoleProgram(target=MemoryProgram(seconds=None))},
                                   None, job)
        await wait_for(plane, inner, S.RUNNING)
        await asyncio.sleep(0.05)  # the writer task writes the latest states
        for member in cluster.members[job]:  # the job dies while no scheduler watches
            member.dead = "killed"
        del cluster.budgets[job]
        return {"job": job, "inner": inner}

    async def after(plane, ids):
        await plane.ready()
        assert plane.recovery["requeued"] == 1 and plane.recovery["adopted"] == 1
        status = await wait_for(plane, ids["inner"], S.CANCELLED)
        assert status.reason == f"its job {ids['job']} is not running (PENDING)"
        for _ in range(200):  # torn down just after its end is recorded
            if ids["inner"] not in cluster.booked:
                break
            await asyncio.sleep(0.01)
        assert ids["inner"] not in cluster.booked
        await plane.shutdown()

    crash_and_restart(cluster, before, after)


def test_a_restarted_scheduler_gives_up_its_first_starts_that_the_cluster_lost():
    """A head replaced restarts the scheduler with no outage it could see; its first
    starts, made while the new GCS takes its nodes back, may be lost (Ray 2.60 keeps the
    members PENDING_CREATION with no process): they are given up LOST_START_S into the
    start and go back in line, with no restart counted (the chaos soak found this)."""
    from raygang.control.outage import LOST_START_S

    cluster = make_cluster("n0: GPU=4")

    async def before(plane):
        cluster.losing_creations = True
        caught = await submit(plane, "caught", "2xGPU=1", seconds=None)
        await wait_for(plane, caught, S.STARTING)
        await asyncio.sleep(0.05)  # the writer task writes the latest states
        return {"caught": caught}

    async def after(plane, ids):
        await plane.ready()
        assert plane.recovery["requeued"] == 1, plane.recovery
        await wait_for(plane, ids["caught"], S.STARTING)  # requeued, started again
        await asyncio.sleep(1.0)
        cluster.losing_creations = False
        status = await wait_for(plane, ids["caught"], S.RUNNING,
                                timeout=LOST_START_S + 10.0)
        assert status.restarts == 0, status
        reasons = [e.reason for e in status.events if e.to_state is S.PENDING]
        assert "lost the start of member(s)" in reasons[-1], reasons
        assert "after the scheduler restarted" in reasons[-1], reasons
        await plane.shutdown()

    crash_and_restart(cluster, before, after, after_s=LOST_START_S + 30)


def test_an_adopted_elastic_gang_lists_the_members_it_grows_afterwards():
    """An elastic gang (2 to 4 members) runs at its minimum beside a blocker when the
    scheduler's process dies; the restarted one adopts it, and once the blocker is gone it
    grows to 4: the members it adds are the gang's as a new run's are (its status lists
    all 4; before, an adopted run told nobody of the members it grew)."""
    from tests.control.test_elastic_runs import elastic, size_of

    cluster = make_cluster("n0: GPU=4")

    async def before(plane):
        blocker = await submit(plane, "blocker", "2xGPU=1", seconds=None)
        await wait_for(plane, blocker, S.RUNNING)
        e = await elastic(plane, "e", 2, 4)
        await size_of(plane, e, 2)
        await asyncio.sleep(0.05)  # the writer task writes the latest states
        return {"blocker": blocker, "e": e}

    async def after(plane, ids):
        await plane.ready()
        assert plane.recovery["adopted"] == 2, plane.recovery
        await plane.cancel(ids["blocker"])
        await size_of(plane, ids["e"], 4, timeout=20)
        status = await plane.status(ids["e"])
        assert sorted((m.role, m.index) for m in status.members) == \
            [("worker", i) for i in range(4)]
        await plane.shutdown()

    crash_and_restart(cluster, before, after)
