"""A gang that started past a blocked one in its queue's line (`backfill_lookahead`) is
cancelled or preempted at every point of its start. Whatever the point, the blocked gang
is not stranded: once room frees it runs, and nothing is left held."""

from __future__ import annotations

import asyncio

import pytest

from raygang.core.gang import GangState as S

from tests.control.harness import make_cluster, make_plane, released, run, submit, until, wait_for

# From the admission of the gang that went past, through its reservation, its members'
# start and the launch barrier, to a while after it runs (the in-memory cluster's steps
# take a few jittered milliseconds each).
DELAYS = [i * 0.004 for i in range(0, 26)]


async def stopped_past_the_blocked(action: str, delay: float) -> None:
    cluster = make_cluster("n0: GPU=4")
    plane = make_plane(cluster)
    holder = await submit(plane, "holder", "3xGPU=1", seconds=None)
    await wait_for(plane, holder, S.RUNNING)
    blocked = await submit(plane, "blocked", "4xGPU=1", seconds=0.05)
    b = plane.registry.get(blocked)
    await until(lambda: b.reason is not None, 5, lambda: "no cycle decided on it")
    past = await submit(plane, "past", "1xGPU=1", seconds=None)
    p = plane.registry.get(past)
    await until(lambda: p.state is not S.PENDING, 5, lambda: f"past: {p.reason}")
    assert b.state is S.PENDING
    await asyncio.sleep(delay)
    if action == "cancel":
        await plane.cancel(past)
        assert (await plane.wait(past, timeout=5)).state is S.CANCELLED
    else:  # the cheapest victim for a more urgent 1-GPU gang
        urgent = await submit(plane, "urgent", "1xGPU=1", priority=500, seconds=0.05)
        assert (await plane.wait(urgent, timeout=10)).state is S.SUCCEEDED
        events = [e.to_state for e in (await plane.status(past)).events]
        assert S.PREEMPTED in events or events.count(S.PENDING) > 1, events
        # Requeued, it goes past the blocked gang again once the urgent one is done.
        await wait_for(plane, past, S.RUNNING)
        await plane.cancel(past)
    assert b.state is S.PENDING  # the holder still holds 3 of the 4 GPUs
    await plane.cancel(holder)
    assert (await plane.wait(blocked, timeout=10)).state is S.SUCCEEDED
    await released(plane)
    assert cluster.booked == {} and cluster.members == {}


@pytest.mark.parametrize("action", ["cancel", "preempt"])
def test_a_gang_started_past_a_blocked_one_stopped_at_any_point_strands_nothing(action):
    for k, delay in enumerate(DELAYS):
        run(lambda: stopped_past_the_blocked(action, delay), seed=k)
