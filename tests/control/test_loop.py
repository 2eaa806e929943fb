"""The scheduling loop, the gang drivers and the lifecycle on an in-memory cluster (no Ray):
submission -> admission -> run -> end, preemption, restart after a member failure, a lost
node, reservation timeouts, cancellation, capacity still being freed."""

from __future__ import annotations

import asyncio

import pytest

from raygang.control.memory import MemoryProgram
from raygang.control.program import RoleProgram
from raygang.core.gang import GangState as S
from raygang.core.resources import Resources
from raygang.core.schedule import schedule

from tests.control.harness import (
    make_cluster, make_plane, moves, released, run, stepped_plane, submit, wait_for,
)
from tests.unit.builders import spec


def test_a_submission_without_a_program_for_each_role_is_refused_and_queues_nothing():
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=4 CPU=8"))
        gang = spec("two-roles", "1xGPU=1 + 2xGPU=1")  # roles r0 and r1
        program = RoleProgram(target=MemoryProgram(seconds=0.01))
        with pytest.raises(ValueError, match="roles without a program to run: r1$"):
            await plane.submit(gang, {"r0": program})
        with pytest.raises(TypeError, match="programs as a dict of role name -> RoleProgram"):
            await plane.submit(gang, {"r0": program, "r1": "not a program"})
        with pytest.raises(TypeError, match="programs as a dict"):
            await plane.submit(gang, [program, program])
        assert await plane.list_gangs() == []
        gang_id = await plane.submit(gang, {"r0": program, "r1": program})
        assert (await plane.wait(gang_id, timeout=5)).state is S.SUCCEEDED
        await plane.shutdown()

    run(scenario)


@pytest.mark.parametrize("seed", range(5))
def test_a_shutdown_right_after_a_gang_ended_waits_for_its_teardown(seed):
    """A gang's end is recorded before it is torn down (a restarted scheduler must not
    run it again); a shutdown then, as `raygang.shutdown()` right after a result came
    back, must wait for the teardown too: the actor is killed next, and what it had not
    removed yet stayed in the cluster (examples/all_or_nothing.py, once in CI)."""
    async def scenario():
        cluster = make_cluster("n0: GPU=4 CPU=8")
        plane = make_plane(cluster)
        gang_id = await submit(plane, "train", "3xGPU=1", seconds=0.05, result="done")
        await wait_for(plane, gang_id, S.SUCCEEDED)  # (most seeds: not torn down yet)
        await plane.shutdown()
        assert not cluster.booked and not list(plane.fleet)

    run(scenario, seed=seed)


def test_a_gang_is_admitted_runs_and_succeeds():
    async def scenario():
        cluster = make_cluster("n0: GPU=4 CPU=8")
        plane = make_plane(cluster)
        gang_id = await submit(plane, "train", "4xGPU=1", seconds=0.05, result="done")
        status = await plane.wait(gang_id, timeout=5)
        assert status.state is S.SUCCEEDED
        assert await plane.results(gang_id) == ["done"] * 4
        assert moves(status) == [
            ("PENDING", "submitted"), ("ADMITTED", "placed on 1 node(s)"),
            ("RESERVED", "placement group ready"),
            ("STARTING", "starting members in role order"),
            ("RUNNING", "all members ready: released past the launch barrier"),
            ("SUCCEEDED", "all members finished")]
        assert [m.node_id for m in status.members] == ["n0"] * 4
        await released(plane)
        assert not cluster.booked  # nothing held any more
        await plane.shutdown()

    run(scenario)


def test_all_or_nothing_a_gang_waits_whole_while_its_members_cannot_all_fit():
    async def scenario():
        cluster = make_cluster("n0: GPU=4", "n1: GPU=4")
        plane = make_plane(cluster)
        first = await submit(plane, "first", "6xGPU=1", seconds=0.3)
        await wait_for(plane, first, S.RUNNING)
        second = await submit(plane, "second", "6xGPU=1", seconds=0.01)
        while (await plane.status(second)).reason is None:  # until a cycle decided on it
            await asyncio.sleep(0.005)
        for _ in range(20):  # while the first runs, the second holds nothing
            status = await plane.status(second)
            assert status.state is S.PENDING and second not in cluster.booked
            assert "needs {GPU: 6} in all" in status.reason
            await asyncio.sleep(0.005)
        assert (await plane.wait(second, timeout=5)).state is S.SUCCEEDED
        await plane.shutdown()

    run(scenario)


def test_inference_preempts_training_which_requeues_with_the_same_id_and_runs_again():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        train = await submit(plane, "train", "4xGPU=1", "STRICT_PACK", seconds=None,
                             priority="training", preemption_grace_s=5)
        await wait_for(plane, train, S.RUNNING)
        infer = await submit(plane, "infer", "2xGPU=1", seconds=None, priority="inference")
        await wait_for(plane, infer, S.RUNNING)
        status = await wait_for(plane, train, S.PENDING)
        assert status.preemptions == 1 and status.gang_id == train
        assert status.reason.startswith(f"preempted by gang {infer}")
        states = [s for s, _ in moves(status)]
        assert states[-3:] == ["RUNNING", "PREEMPTED", "PENDING"]
        assert moves(status)[-3][1].endswith("grace 5s")  # told, then stopped
        await plane.cancel(infer)
        status = await wait_for(plane, train, S.RUNNING)
        assert status.preemptions == 1 and status.gang_id == train
        await plane.shutdown()

    run(scenario)


def test_the_grace_period_ends_when_nothing_is_left_to_finish():
    async def scenario():
        cluster = make_cluster("n0: GPU=2")
        plane = make_plane(cluster)
        # A body that returns 0.2 s after it is told, with a grace of 30 s.
        train = await submit(plane, "train", "2xGPU=1", seconds=3600, on_preempt="watch",
                             checkpoint_s=0.2, priority="batch", preemption_grace_s=30)
        await wait_for(plane, train, S.RUNNING)
        loop = asyncio.get_running_loop()
        started = loop.time()
        infer = await submit(plane, "infer", "2xGPU=1", seconds=None, priority="inference")
        await wait_for(plane, infer, S.RUNNING)
        assert 0.2 <= loop.time() - started < 5
        await plane.shutdown()

    run(scenario)


def test_a_member_failure_restarts_the_gang_whole_after_a_backoff_then_it_fails():
    async def scenario():
        cluster = make_cluster("n0: CPU=4")
        plane = make_plane(cluster)
        gang_id = await submit(plane, "flaky", "2xCPU=1", seconds=1, fails_after_s=0.02,
                               max_restarts=2)
        status = await plane.wait(gang_id, timeout=10)
        assert status.state is S.FAILED and status.restarts == 2
        await released(plane)
        assert status.error.summary == "member r0-0 (rank 0) raised RuntimeError: the body failed"
        restarts = [r for s, r in moves(status) if s == "RESTARTING"]
        assert restarts == [f"restart {n}/2 after {status.error.summary}" for n in (1, 2)]
        backoff = [r for s, r in moves(status) if r.startswith("requeued to restart")]
        assert backoff == ["requeued to restart whole, not before 0.05s from now",
                           "requeued to restart whole, not before 0.1s from now"]
        # Each restart waited out its backoff before it was admitted again.
        events = status.events
        for i, event in enumerate(events):
            if event.reason.startswith("requeued to restart"):
                admitted = next(e for e in events[i:] if e.to_state is S.ADMITTED)
                assert admitted.at - event.at >= 0.05
        assert not cluster.booked
        await plane.shutdown()

    run(scenario)


def test_a_lost_node_restarts_the_gang_elsewhere():
    async def scenario():
        cluster = make_cluster("n0: CPU=2", "n1: CPU=2")
        plane = make_plane(cluster)
        gang_id = await submit(plane, "job", "2xCPU=1", "STRICT_PACK", seconds=0.3,
                               max_restarts=1)
        status = await wait_for(plane, gang_id, S.RUNNING)
        (lost,) = {m.node_id for m in status.members}
        cluster.lose_node(lost)
        await wait_for(plane, gang_id, S.PENDING)
        # Waiting for it to run (GangRef.ready) waits for the new attempt, not the lost one
        again = await plane.wait(gang_id, timeout=10, until_running=True)
        assert again.state is S.RUNNING and again.restarts == 1, again
        assert {m.node_id for m in again.members} == {"n0", "n1"} - {lost}
        status = await plane.wait(gang_id, timeout=10)
        assert status.state is S.SUCCEEDED and status.restarts == 1
        assert {m.node_id for m in status.members} == {"n0", "n1"} - {lost}
        assert any(f"node {lost} was lost" in r for _, r in moves(status))
        await plane.shutdown()

    run(scenario)


def test_a_reservation_that_times_out_is_requeued():
    async def scenario():
        cluster = make_cluster("n0: GPU=2")
        # Work not started by raygang, which the cluster's view does not show yet: the
        # gang is admitted, its reservation waits, times out, and it goes back in line.
        cluster.use_outside("n0", Resources(GPU=2), seen=False)
        plane = make_plane(cluster)
        gang_id = await submit(plane, "job", "2xGPU=1", seconds=0, reservation_timeout_s=0.05)
        status = await wait_for(plane, gang_id, S.PENDING, S.ADMITTED)
        for _ in range(200):
            status = await plane.status(gang_id)
            if any(r.startswith("requeued: the reservation") for _, r in moves(status)):
                break
            await asyncio.sleep(0.01)
        assert any(r == f"requeued: the reservation of gang {gang_id} was not ready within "
                   "0.05s" for _, r in moves(status))
        cluster.use_outside("n0", Resources(), seen=False)  # the other work ends
        assert (await plane.wait(gang_id, timeout=5)).state is S.SUCCEEDED
        await plane.shutdown()

    run(scenario)


def test_cancel_a_pending_and_a_running_gang():
    async def scenario():
        cluster = make_cluster("n0: GPU=1")
        plane = make_plane(cluster)
        running = await submit(plane, "svc", "GPU=1", seconds=None)
        await wait_for(plane, running, S.RUNNING)
        pending = await submit(plane, "later", "GPU=1", seconds=0)
        status = await plane.cancel(pending, "not needed")
        assert status.state is S.CANCELLED and status.reason == "not needed"
        status = await plane.cancel(running)  # returns once the gang holds nothing
        assert status.state is S.CANCELLED and not cluster.booked
        assert [s for s, _ in moves(status)][-1] == "CANCELLED"
        await plane.shutdown()

    run(scenario)


def test_a_gang_on_capacity_being_freed_waits_for_the_victim():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        victim = await submit(plane, "victim", "GPU=4", seconds=3600, on_preempt="ignore",
                              priority="batch", preemption_grace_s=0.3)
        await wait_for(plane, victim, S.RUNNING)
        first = await submit(plane, "first", "2xGPU=1", seconds=None, priority="inference")
        second = await submit(plane, "second", "2xGPU=1", seconds=None, priority="inference",
                              reservation_timeout_s=0.1)
        for gang_id in (first, second):
            await wait_for(plane, gang_id, S.RUNNING)
        statuses = [await plane.status(g) for g in (first, second)]
        admitted = [next(e for e in s.events if e.to_state is S.ADMITTED) for s in statuses]
        waited = [a for a in admitted if a.reason.endswith("waiting for 1 preempted gang(s) "
                                                          "to stop")]
        assert waited  # at least the preemptor (both, if one cycle admitted both)
        for status in statuses:
            assert not any("requeued" in r for _, r in moves(status))
        await plane.shutdown()

    run(scenario)


def test_a_plan_applied_after_its_preemptor_was_cancelled_strands_no_gang():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = await stepped_plane(cluster)
        victim = await submit(plane, "victim", "GPU=4", seconds=None, priority="batch",
                              preemption_grace_s=0)
        plane.loop.cycle()
        await wait_for(plane, victim, S.RUNNING)
        first = await submit(plane, "first", "2xGPU=1", seconds=None, priority="inference")
        second = await submit(plane, "second", "2xGPU=1", seconds=None, priority="inference")
        # The cycle decides (as it would in its thread) ...
        now, snapshot, backlog, policy = plane.loop._prepare()
        plan = schedule(snapshot, backlog, policy, now)
        by_id = {a.gang_id: a for a in plan.admissions}
        assert by_id[first].victims == (victim,) and by_id[second].waits_for == (victim,)
        # ... the preemptor is cancelled meanwhile, then the plan is applied.
        await plane.cancel(first)
        plane.loop._apply(now, plan, snapshot)
        await asyncio.sleep(0.05)
        assert (await plane.status(victim)).state is S.RUNNING  # not stopped for nobody
        assert (await plane.status(second)).state is S.PENDING  # not left waiting for it
        plane.loop.cycle()  # the next cycle decides afresh: the second preempts it itself
        await wait_for(plane, second, S.RUNNING)
        assert (await plane.status(victim)).preemptions == 1
        await plane.shutdown()

    run(scenario)


def test_a_member_failing_during_its_grace_period_requeues_the_gang_not_fails_it():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        train = await submit(plane, "train", "4xGPU=1", seconds=60, fails_after_s=1.0,
                             on_preempt="ignore", priority="training", max_restarts=0,
                             preemption_grace_s=5)
        await wait_for(plane, train, S.RUNNING)
        infer = await submit(plane, "infer", "4xGPU=1", seconds=None, priority="inference")
        status = await wait_for(plane, train, S.PENDING, S.FAILED)
        # It exited (failed) while being stopped: that ends its grace period early, and
        # it goes back in line as preempted, not failed and not restarted.
        assert status.state is S.PENDING and status.preemptions == 1
        assert status.restarts == 0 and status.error is None
        await wait_for(plane, infer, S.RUNNING)
        await plane.shutdown()

    run(scenario)


def test_capacity_a_gang_just_released_is_taken_once_not_once_per_cycle():
    # Released gangs count as leaving for a moment (Ray's view lags their removal); the
    # gang admitted onto that capacity books it, so the cycles after do not count it again.
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        first = await submit(plane, "first", "1xGPU=4", seconds=0.2)
        await wait_for(plane, first, S.RUNNING)
        others = [await submit(plane, f"next{i}", "1xGPU=4", seconds=5) for i in range(3)]
        await wait_for(plane, others[0], S.RUNNING)
        for _ in range(20):  # cycles run on (resync 50 ms) while the ghost is remembered
            await asyncio.sleep(0.02)
            states = [(await plane.status(o)).state for o in others[1:]]
            assert states == [S.PENDING, S.PENDING], states
        assert len(cluster.booked) == 1
        await plane.shutdown()

    run(scenario)


@pytest.mark.parametrize("name", ["loop", "inside"])
def test_a_loop_cancelled_in_the_step_it_is_woken_ends(name):
    """asyncio.wait_for before Python 3.12 returns normally when it is cancelled in the
    step its inner wait ends (bpo-42130); a scheduling loop built on it swallowed the
    cancellation and ran on for ever, and so did whatever waited for it to end."""
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=1"))
        await plane.ready()
        await asyncio.sleep(0.01)  # it waits for its next wake
        task = plane._tasks[name]
        (plane.loop._wake if name == "loop" else plane.inside._wake).set()
        task.cancel()  # in the same step as the wake
        await asyncio.wait([task], timeout=1.0)
        assert task.done(), f"the {name} task swallowed its cancellation"

    run(scenario)


def test_a_gang_cancelled_right_after_its_admission_is_torn_down():
    """Cancelled in the instant after admission (its drive created, not yet run a step):
    CANCELLED, nothing held (found on Ray by the API load test)."""
    async def scenario():
        cluster = make_cluster("n0: CPU=4")
        plane = await stepped_plane(cluster)
        gang_id = await submit(plane, "instant", "2xCPU=1", seconds=60)
        plane.loop.cycle()  # admits it: its task exists but has not run a step
        assert plane.registry.get(gang_id).state is S.ADMITTED
        assert not plane.fleet.driver(gang_id).task.done()
        status = await plane.cancel(gang_id, "cancelled at once")
        assert status.state is S.CANCELLED and status.reason == "cancelled at once"
        assert not list(plane.fleet) and not cluster.booked and not cluster.members

    run(scenario)


def test_a_submission_and_a_gang_end_wake_the_loop_not_only_its_timer():
    """With a resync interval of 30 s, a submission is admitted at once, and a gang waiting
    for capacity is admitted as soon as the gang holding it ends."""
    async def scenario():
        cluster = make_cluster("n0: GPU=8")
        plane = make_plane(cluster, resync_interval_s=30.0)
        await plane.ready()
        await asyncio.sleep(1.0)  # past the cycle the start itself ran
        first = await submit(plane, "first", "8xGPU=1", seconds=3.0)
        status = await wait_for(plane, first, S.RUNNING)
        admitted = next(e.at for e in status.events if e.to_state is S.ADMITTED)
        assert admitted - status.submitted_at < 0.5
        second = await submit(plane, "second", "GPU=1", seconds=1.0)
        await asyncio.sleep(0.5)
        assert (await plane.status(second)).state is S.PENDING  # it waits, for GPUs
        done = await plane.wait(first, timeout=10)
        assert done.state is S.SUCCEEDED
        status = await wait_for(plane, second, S.RUNNING, S.SUCCEEDED)
        admitted = next(e.at for e in status.events if e.to_state is S.ADMITTED)
        assert 0 <= admitted - done.finished_at < 0.5  # not on the next timer tick (30 s)
        await plane.shutdown()

    run(scenario)


def test_one_gang_failing_does_not_touch_another():
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=4"))
        bad = await submit(plane, "bad", "2xGPU=1", seconds=1, fails_to_start=True)
        good = await submit(plane, "good", "2xGPU=1", seconds=0.5, result="ok")
        assert (await plane.wait(good, timeout=10)).state is S.SUCCEEDED
        assert await plane.results(good) == ["ok", "ok"]
        status = await plane.wait(bad, timeout=10)
        assert status.state is S.FAILED and "the constructor failed" in status.error.message
        assert plane.loop.last_error is None
        await plane.shutdown()

    run(scenario)
