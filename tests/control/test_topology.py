"""Topology-aware gangs through the loop, the drivers and the lifecycle, on an in-memory
cluster whose nodes are labelled with racks (no Ray): a gang waits while no single rack has
room and says so, then runs in one rack; segments of consecutive ranks each in one rack; a
gang that loses a node starts again in a rack that still holds it whole."""

from __future__ import annotations

import asyncio

from raygang.core.gang import GangState as S

from tests.control.harness import make_cluster, make_plane, released, run, submit, wait_for

# Two racks of two 4-GPU nodes, and one rack of one.
RACKS = ("a-1: GPU=4 @rack=r1", "a-2: GPU=4 @rack=r1", "b-1: GPU=4 @rack=r2",
         "b-2: GPU=4 @rack=r2", "c-1: GPU=4 @rack=r3")


def _racks(cluster, status) -> list[str]:
    """The rack of each member, in rank order."""
    members = sorted(status.members, key=lambda m: m.rank)
    return [cluster.nodes[m.node_id].labels["rack"] for m in members]


def test_a_gang_waits_for_room_in_one_rack_says_so_and_then_runs_in_one():
    async def scenario():
        cluster = make_cluster(*RACKS)
        plane = make_plane(cluster)
        # 3 GPUs on each node of r1 and r2: 8 GPUs free in all, at most 4 in one rack.
        fill_a = await submit(plane, "fill-a", "2xGPU=3", "STRICT_SPREAD", seconds=None)
        fill_b = await submit(plane, "fill-b", "2xGPU=3", "STRICT_SPREAD", seconds=None)
        for gang_id, rack in ((fill_a, "r1"), (fill_b, "r2")):
            assert set(_racks(cluster, await wait_for(plane, gang_id, S.RUNNING))) == {rack}
        ranked = await submit(plane, "ranked", "5xGPU=1", seconds=0.5,
                              topology={"required": "rack"})
        status = await wait_for(plane, ranked, S.PENDING)
        while status.reason is None:  # until a cycle decided on it
            await asyncio.sleep(0.005)
            status = await plane.status(ranked)
        assert "needs {GPU: 5} within one domain of 'rack'" in status.reason
        assert "no single rack has room now: free GPU by rack r3: 4 on 1 node, r1: 2 on 2 " \
               "nodes, r2: 2 on 2 nodes" in status.reason
        await plane.cancel(fill_a)  # r1 now has 8 free
        status = await plane.wait(ranked, timeout=10)
        assert status.state is S.SUCCEEDED
        assert set(_racks(cluster, status)) == {"r1"}
        await plane.cancel(fill_b)
        await released(plane)
        assert not cluster.booked
        await plane.shutdown()

    run(scenario)


def test_segments_of_consecutive_ranks_each_stay_in_one_rack():
    async def scenario():
        cluster = make_cluster(*RACKS)
        plane = make_plane(cluster)
        gang_id = await submit(plane, "tp", "12xGPU=1", seconds=0.2,
                               topology={"segment": 4, "segment_level": "rack"})
        status = await wait_for(plane, gang_id, S.RUNNING)
        racks = _racks(cluster, status)
        for start in range(0, 12, 4):
            assert len(set(racks[start:start + 4])) == 1, racks
        assert len(set(racks)) >= 2  # 12 GPUs: more than one rack holds
        assert (await plane.wait(gang_id, timeout=5)).state is S.SUCCEEDED
        await plane.shutdown()

    run(scenario)


def test_a_gang_that_loses_a_node_starts_again_whole_in_another_rack():
    async def scenario():
        cluster = make_cluster(*RACKS)
        plane = make_plane(cluster)
        gang_id = await submit(plane, "spread", "2xGPU=4", "STRICT_SPREAD", seconds=0.3,
                               max_restarts=1, topology={"required": "rack"})
        status = await wait_for(plane, gang_id, S.RUNNING)
        (first,) = set(_racks(cluster, status))
        lost = status.members[0].node_id
        cluster.lose_node(lost)
        status = await plane.wait(gang_id, timeout=10)
        assert status.state is S.SUCCEEDED and status.restarts == 1
        racks = _racks(cluster, status)
        assert len(set(racks)) == 1 and racks[0] != first  # its rack has one node left
        await plane.shutdown()

    run(scenario)
