"""Elastic gangs on the in-memory cluster (its runs add and remove members): admitted at
their minimum, grown as capacity frees, shrunk before anyone is stopped whole, never below
their minimum, nothing left behind. Where a cluster does not resize, and for what is not
carried out yet, a submission says so and queues nothing."""

from __future__ import annotations

import asyncio

import pytest

from raygang.control.errors import DeploymentExistsError
from raygang.control.memory import MemoryProgram
from raygang.control.program import RoleProgram
from raygang.core.gang import GangState as S
from raygang.core.queues import QueueSpec
from raygang.core.spec import Resize, RoleSpec
from raygang.core.workload_specs import DeploymentSpec

from tests.control.harness import (make_cluster, make_plane, released, run, stepped_plane,
                                   submit, wait_for)
from tests.unit.builders import spec



async def elastic(plane, name: str, low: int, high: int, seconds: float | None = None,
                  **fields: object) -> str:
    s = spec(name, "GPU=1", "PACK", **fields).model_copy(update={"roles": (
        RoleSpec(name="worker", replicas=(low, high), resources={"GPU": 1}),)})
    return await plane.submit(s, {"worker": RoleProgram(target=MemoryProgram(
        seconds=seconds, on_preempt="hook"))})


async def size_of(plane, gang_id: str, size: int, timeout: float = 5.0) -> None:
    """Wait until the gang runs exactly `size` members."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        status = await plane.status(gang_id)
        if status.state is S.RUNNING and len(status.members) == size:
            return
        assert loop.time() < deadline, (len(status.members), status.reason)
        await asyncio.sleep(0.005)

async def cancel_all(plane, cluster, *gang_ids: str) -> None:
    """Cancel these gangs; afterwards nothing is booked or running in the cluster."""
    for gang in gang_ids:
        await plane.cancel(gang)
    await released(plane)
    assert cluster.booked == {} and cluster.members == {}



def test_an_elastic_gang_starts_at_its_minimum_and_grows_when_a_blocker_ends():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        blocker = await submit(plane, "blocker", "2xGPU=1", seconds=0.3)
        await wait_for(plane, blocker, S.RUNNING)
        e = await elastic(plane, "e", 2, 4)
        await size_of(plane, e, 2)
        status = await plane.status(e)
        while status.grow_reason is None:  # the next cycle says why it does not grow
            await asyncio.sleep(0.005)
            status = await plane.status(e)
        assert (status.world_size, status.min_size, status.max_size) == (2, 2, 4)
        assert status.grow_reason.startswith("runs 2 of at most 4 members; grows no further "
                                             "now: no node has GPU 1 free for member worker-2")
        first = {m.actor_name for m in status.members}
        await wait_for(plane, blocker, S.SUCCEEDED)
        await size_of(plane, e, 4)
        status = await plane.status(e)
        assert first <= {m.actor_name for m in status.members}  # the first two untouched
        assert any("grew to 4 members" in ev.reason for ev in status.events)
        assert plane.fleet.driver(e).record.live.surplus == {"worker-2": "n0", "worker-3": "n0"}
        assert (status.world_size, status.min_size, status.max_size) == (4, 2, 4)
        assert status.grow_reason is None  # at its maximum
        await cancel_all(plane, cluster, e)
    run(scenario)


def test_a_higher_priority_gang_shrinks_the_surplus_and_stops_no_whole_gang():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        e = await elastic(plane, "e", 2, 4)
        await size_of(plane, e, 4)
        infer = await submit(plane, "infer", "2xGPU=1", priority="inference", seconds=None)
        await wait_for(plane, infer, S.RUNNING)
        await size_of(plane, e, 2)
        status = await plane.status(e)
        assert status.state is S.RUNNING and status.preemptions == 0
        assert any("shrinking to 2 members" in ev.reason for ev in status.events)
        await plane.cancel(infer)
        await size_of(plane, e, 4)  # it grows back
        # More than the surplus: the elastic gang goes whole (never below its minimum).
        big = await submit(plane, "big", "3xGPU=1", priority="inference", seconds=None)
        await wait_for(plane, big, S.RUNNING)
        status = await plane.status(e)
        assert status.state is S.PENDING and status.preemptions == 1
        await cancel_all(plane, cluster, big, e)
    run(scenario)


def test_a_gang_of_the_same_queue_takes_back_what_growth_took():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        e = await elastic(plane, "e", 1, 4)
        await size_of(plane, e, 4)
        later = await submit(plane, "later", "2xGPU=1", seconds=None)
        await wait_for(plane, later, S.RUNNING)
        await size_of(plane, e, 2)
        await cancel_all(plane, cluster, later, e)
    run(scenario)


def test_a_restart_gang_stops_whole_and_starts_again_at_each_new_size():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        blocker = await submit(plane, "blocker", "2xGPU=1", seconds=0.3)
        await wait_for(plane, blocker, S.RUNNING)
        e = await elastic(plane, "e", 2, 4, resize=Resize.RESTART, preemption_grace_s=1.0)
        await size_of(plane, e, 2)
        first = list(cluster.members[e])
        await wait_for(plane, blocker, S.SUCCEEDED)
        await size_of(plane, e, 4)
        now = list(cluster.members[e])
        assert [m.rank for m in now] == [0, 1, 2, 3]
        assert not {id(m) for m in first} & {id(m) for m in now}  # every member anew
        assert all(m.told_at is not None for m in first)  # each was told to checkpoint
        status = await plane.status(e)
        assert any("restarted at 4 members (added worker-2, worker-3)" in ev.reason
                   for ev in status.events), [ev.reason for ev in status.events]
        # A higher priority takes the surplus back: the gang restarts at 2, not preempted.
        infer = await submit(plane, "infer", "2xGPU=1", priority="inference", seconds=None)
        await wait_for(plane, infer, S.RUNNING)
        await size_of(plane, e, 2)
        status = await plane.status(e)
        assert status.state is S.RUNNING and status.preemptions == 0
        assert any("restarted at 2 members (removed worker-2, worker-3)" in ev.reason
                   for ev in status.events)
        await cancel_all(plane, cluster, infer, e)
    run(scenario)


@pytest.mark.parametrize("change", ["grow", "shrink"])
def test_bodies_that_return_when_told_to_stop_restart_the_gang_rather_than_end_it(change):
    # A body that watches `get_context().preempted` checkpoints and returns when told (as
    # data-parallel code does): told for a restart, its return is not the gang's end. Seen
    # on Ray (CI): the gang SUCCEEDED at its old size instead of restarting at the new one.
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        blocker = await submit(plane, "blocker", "2xGPU=1", seconds=0.3)
        await wait_for(plane, blocker, S.RUNNING)
        s = spec("e", "GPU=1", "PACK", resize=Resize.RESTART, preemption_grace_s=1.0
                 ).model_copy(update={"roles": (
                     RoleSpec(name="worker", replicas=(2, 4), resources={"GPU": 1}),)})
        e = await plane.submit(s, {"worker": RoleProgram(target=MemoryProgram(
            seconds=100.0, on_preempt="watch", checkpoint_s=0.05))})
        await size_of(plane, e, 2)
        await wait_for(plane, blocker, S.SUCCEEDED)
        await size_of(plane, e, 4)
        if change == "shrink":
            infer = await submit(plane, "infer", "2xGPU=1", priority="inference", seconds=None)
            await wait_for(plane, infer, S.RUNNING)
            await size_of(plane, e, 2)
            await plane.cancel(infer)
        status = await plane.status(e)
        assert (status.state, status.restarts, status.preemptions) == (S.RUNNING, 0, 0)
        await cancel_all(plane, cluster, e)
    run(scenario)


def test_a_member_failing_to_start_again_fails_the_restarted_gang_whole():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        blocker = await submit(plane, "blocker", "2xGPU=1", seconds=0.2)
        await wait_for(plane, blocker, S.RUNNING)
        s = spec("e", "GPU=1", "PACK", resize=Resize.RESTART, max_restarts=0).model_copy(
            update={"roles": (RoleSpec(name="worker", replicas=(2, 4), resources={"GPU": 1}),)})
        e = await plane.submit(s, {"worker": RoleProgram(target=MemoryProgram(seconds=None))})
        await size_of(plane, e, 2)
        # From now on a member's constructor raises: the restart at 4 fails.
        plane.fleet.driver(e).run.programs["worker"] = MemoryProgram(fails_to_start=True)
        await wait_for(plane, e, S.FAILED)
        status = await plane.status(e)
        assert status.error is not None and "constructor failed" in status.error.message
        await released(plane)
        assert cluster.booked == {} and cluster.members == {}
    run(scenario)


@pytest.mark.parametrize("how, message", [
    ("no-resize", "are not run yet on this cluster"),
    ("live-only", "are not run yet with resize 'restart' on this cluster"),
])
def test_what_is_not_carried_out_yet_is_refused_with_the_role_and_nothing_is_queued(
        how, message):
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        cluster.resizes = frozenset() if how == "no-resize" else frozenset({Resize.LIVE})
        plane = make_plane(cluster)
        s = spec("e", "CPU=1 + GPU=1").model_copy(update={"roles": (
            RoleSpec(name="head"), RoleSpec(name="worker", replicas=(2, 4),
                                            resources={"GPU": 1})),
            "resize": Resize.RESTART})
        programs = {r.name: RoleProgram(target=MemoryProgram()) for r in s.roles}
        with pytest.raises(ValueError, match=r"roles\[1\]\.replicas: elastic roles "
                                             r"\(replicas=\(2, 4\)\) " + message):
            await plane.submit(s, programs)
        assert await plane.list_gangs() == []
    run(scenario)


def test_an_elastic_deployment_grows_on_its_node_only_and_shrinks_for_a_more_urgent_one():
    async def scenario():
        cluster = make_cluster("w-1: GPU=2", "w-2: GPU=4")
        plane = make_plane(cluster)
        chat = await plane.deploy(DeploymentSpec(  # PACK: it would grow onto w-2 too
            name="chat", replicas=(1, 3), resources={"GPU": 1}, strategy="PACK"),
            app="pkg.module:app")
        await size_of(plane, chat, 2)
        record = plane.fleet.driver(chat).record
        assert record.nodes == ("w-1",) and record.live.surplus == {"replica-1": "w-1"}
        status = await plane.status(chat)
        while status.grow_reason is None:  # the next cycle says why it does not grow
            await asyncio.sleep(0.005)
            status = await plane.status(chat)
        assert "no node of its own (it grows on no other) has GPU 1 free for member " \
               "replica-2" in status.grow_reason
        hold = await submit(plane, "hold", "4xGPU=1", "STRICT_PACK", priority="training",
                            seconds=None)
        await wait_for(plane, hold, S.RUNNING)
        urgent = await plane.deploy(DeploymentSpec(
            name="urgent", replicas=1, resources={"GPU": 1}, priority=2000),
            app="pkg.module:app")
        await wait_for(plane, urgent, S.RUNNING)
        await size_of(plane, chat, 1)  # its surplus went; nobody was preempted whole
        assert (await plane.status(hold)).preemptions == 0
        assert (await plane.status(chat)).preemptions == 0
        assert plane.fleet.driver(urgent).record.nodes == ("w-1",)
        await plane.undeploy("urgent")
        await size_of(plane, chat, 2)  # grown back
        await plane.undeploy("chat")
        await plane.cancel(hold)
        await released(plane)
        assert cluster.booked == {} and cluster.members == {}
    run(scenario)


def test_a_queue_reclaiming_its_quota_takes_the_surplus_first():
    # 8 GPUs: 2 in `default`, 6 in team-a (quota 2) by an elastic gang of 2 to 6. When
    # team-b (quota 2) asks for its 2, team-a's fair share is 4 (its quota and half the
    # GPUs no queue is guaranteed), `default` runs within its own: reclaim takes two of
    # team-a's surplus members, and no gang is stopped whole.
    async def scenario():
        cluster = make_cluster("w-1: GPU=4", "w-2: GPU=4")
        plane = make_plane(cluster, queues=[
            QueueSpec(name="default"), QueueSpec(name="team-a", quota={"GPU": 2}),
            QueueSpec(name="team-b", quota={"GPU": 2})],
            preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0})
        keep = await submit(plane, "keep", "2xGPU=1", seconds=None)
        await wait_for(plane, keep, S.RUNNING)
        e = await elastic(plane, "e", 2, 6, queue="team-a")
        await size_of(plane, e, 6)
        first = {m.actor_name for m in (await plane.status(e)).members[:2]}
        owed = await submit(plane, "owed", "2xGPU=1", queue="team-b", seconds=None)
        await wait_for(plane, owed, S.RUNNING)
        await size_of(plane, e, 4)
        status = await plane.status(e)
        assert (status.state, status.preemptions) == (S.RUNNING, 0)
        assert (await plane.status(keep)).preemptions == 0
        assert first == {m.actor_name for m in status.members[:2]}
        assert any("shrinking to 4 members" in ev.reason and "reclaimed for gang" in ev.reason
                   for ev in status.events), [ev.reason for ev in status.events]
        await cancel_all(plane, cluster, owed, e, keep)
    run(scenario)


def test_two_deploys_of_one_name_at_once_queue_one_and_refuse_the_other():
    # Each reads the cluster between the name's check and the book (the plane's view is
    # older than the resync interval: nothing cycles): only one may get in.
    async def scenario():
        plane = await stepped_plane(make_cluster("w-1: GPU=2"))
        await asyncio.sleep(1)
        answers = await asyncio.gather(*(plane.deploy(DeploymentSpec(
            name="chat", replicas=1, resources={"GPU": 1}), app="pkg.module:app")
            for _ in range(2)), return_exceptions=True)
        refused = [a for a in answers if isinstance(a, DeploymentExistsError)]
        (queued,) = [a for a in answers if isinstance(a, str)]
        assert len(refused) == 1 and "deployment 'chat' exists" in str(refused[0])
        assert [d.gang_id for d in await plane.list_deployments()] == [queued]
    run(scenario)
