"""A gang's `max_runtime_s` on the in-memory cluster: a run that lasts that long is
cancelled with the limit as its reason and frees what it held; the limit counts from the
run's start (not from submission), and from the first process's start for a gang a
restarted scheduler adopted; a cancel, a preemption or a resize just before, at or just
after the limit ends the gang once and strands nothing."""

from __future__ import annotations

import asyncio

import pytest

from raygang.core.gang import GangState as S

from tests.control.test_elastic_runs import elastic, size_of
from tests.control.harness import make_cluster, make_plane, released, run, submit, wait_for
from tests.control.test_recovery import crash_and_restart
from tests.control.test_recovery import make_cluster as virtual_cluster


def test_a_run_past_its_limit_is_cancelled_and_one_within_it_is_not():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        endless = await submit(plane, "endless", "2xGPU=1", seconds=None, max_runtime_s=1.0)
        quick = await submit(plane, "quick", "2xGPU=1", seconds=0.2, max_runtime_s=1.0)
        assert (await plane.wait(quick, timeout=5)).state is S.SUCCEEDED
        status = await plane.wait(endless, timeout=5)
        assert status.state is S.CANCELLED
        assert status.events[-1].reason == "ran past its max_runtime_s (1 s)"
        record = plane.registry.get(endless)
        assert record.finished_at - record.started_at >= 1.0
        await released(plane)
        assert cluster.booked == {} and cluster.members == {}
    run(scenario)


def test_the_limit_counts_from_the_start_not_from_the_submission():
    async def scenario():
        cluster = make_cluster("n0: GPU=2")
        plane = make_plane(cluster)
        first = await submit(plane, "first", "2xGPU=1", seconds=2.0)
        waits = await submit(plane, "waits", "2xGPU=1", seconds=0.5, max_runtime_s=1.0)
        assert (await plane.wait(first, timeout=5)).state is S.SUCCEEDED
        # Pending for 2 s, longer than its limit: it still runs its 0.5 s to the end
        assert (await plane.wait(waits, timeout=5)).state is S.SUCCEEDED
        await released(plane)
    run(scenario)


def test_an_adopted_run_keeps_the_limit_from_its_first_start():
    cluster = virtual_cluster("n0: GPU=2")

    async def before(plane):
        gang_id = await submit(plane, "endless", "2xGPU=1", seconds=None, max_runtime_s=5.0)
        await wait_for(plane, gang_id, S.RUNNING)
        started = plane.registry.get(gang_id).started_at
        await asyncio.sleep(3.0)
        return gang_id, started

    async def after(plane, ids):
        gang_id, started = ids
        await plane.ready()
        assert plane.recovery["adopted"] == 1
        status = await wait_for(plane, gang_id, S.CANCELLED, timeout=10)
        assert status.events[-1].reason == "ran past its max_runtime_s (5 s)"
        # Cancelled 5 s after the first start, not 5 s after the adoption
        assert plane.registry.get(gang_id).finished_at - started < 5.5
        await released(plane)
        assert cluster.booked == {} and cluster.members == {}

    crash_and_restart(cluster, before, after)


# Around the instant the limit fires (the helpers look every 5 ms of virtual time)
LIMIT = 0.5
OFFSETS = [-0.03, -0.01, 0.0, 0.01, 0.03]


async def at_the_limit(action: str, offset: float) -> None:
    cluster = make_cluster("n0: GPU=4")
    plane = make_plane(cluster)
    if action == "resize":  # grows to 4 members; the urgent gang shrinks it back to 2
        limited = await elastic(plane, "limited", 2, 4, max_runtime_s=LIMIT)
    else:
        limited = await submit(plane, "limited", "2xGPU=1", seconds=None,
                               max_runtime_s=LIMIT, preemption_grace_s=0.05)
    await wait_for(plane, limited, S.RUNNING)
    if action == "resize":
        await size_of(plane, limited, 4)
    await asyncio.sleep(LIMIT + offset)
    if action == "cancel":
        await plane.cancel(limited)
    else:
        shape = "4xGPU=1" if action == "preempt" else "2xGPU=1"
        urgent = await submit(plane, "urgent", shape, priority=500, seconds=0.05)
        # (the limited gang held all 4 GPUs: it shrank, was stopped, or ended)
        assert (await plane.wait(urgent, timeout=10)).state is S.SUCCEEDED
    # Whichever came first, it ends cancelled (a gang preempted before its limit runs
    # again and meets the limit of its new run), and holds nothing
    status = await wait_for(plane, limited, S.CANCELLED, timeout=10)
    assert status.events[-1].reason in ("cancelled by user", "ran past its max_runtime_s (0.5 s)")
    await released(plane)
    assert cluster.booked == {} and cluster.members == {}


@pytest.mark.parametrize("action", ["cancel", "preempt", "resize"])
def test_a_stop_at_any_point_around_the_limit_ends_the_gang_once_and_strands_nothing(action):
    for k, offset in enumerate(OFFSETS):
        run(lambda: at_the_limit(action, offset), seed=k)
