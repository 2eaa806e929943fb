"""A gang's `max_runtime_s` on the in-memory cluster: a run that lasts that long is
cancelled with the limit as its reason and frees what it held; the limit counts from the
run's start (not from submission), and from the first process's start for a gang a
restarted scheduler adopted."""

from __future__ import annotations

import asyncio

from raygang.core.gang import GangState as S

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
