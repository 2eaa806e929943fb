"""Gangs submitted from inside a running job (control/inside.py), on the in-memory cluster:
placed in the job's budget, never queued nor booked a second time, in submission order,
and ended with their job."""

from __future__ import annotations

import asyncio

import pytest

from raygang.control.errors import GangNotFoundError, UnschedulableError
from raygang.control.program import RoleProgram
from raygang.core.gang import GangState as S
from raygang.control.memory import MemoryProgram

from tests.control.harness import run, make_cluster, make_plane, moves, released, submit, wait_for
from tests.unit.builders import spec



async def inside(plane, parent: str, name: str, shape: str, **program: object) -> str:
    s = spec(name, shape, "PACK")
    return await plane.submit(s, {r.name: RoleProgram(target=MemoryProgram(**program))
                                  for r in s.roles}, None, parent)


async def a_job(cluster, plane, shape: str = "2xGPU=1") -> str:
    """A running gang standing in for a job whose driver submits gangs."""
    job = await submit(plane, "job", shape, seconds=None, queue="default")
    await wait_for(plane, job, S.RUNNING)
    cluster.open_budget(job)
    return job


def test_gangs_inside_a_job_take_its_bundles_wait_in_order_and_give_them_back():
    async def scenario():
        cluster = make_cluster("n0: GPU=2", "n1: GPU=2")
        plane = make_plane(cluster, queues=[{"name": "default", "limit": {"GPU": 2}}])
        job = await a_job(cluster, plane)
        nodes = set((await plane.status(job)).nodes())
        first = await inside(plane, job, "first", "1xGPU=1", seconds=0.3)
        second = await inside(plane, job, "second", "1xGPU=1", seconds=0.3)
        third = await inside(plane, job, "third", "2xGPU=1", seconds=0.01)
        fourth = await inside(plane, job, "fourth", "1xGPU=1", seconds=0.01)
        for gang in (first, second):
            status = await wait_for(plane, gang, S.RUNNING)
            assert set(status.nodes()) <= nodes and status.parent == job
        status = await plane.status(third)
        assert status.state is S.PENDING
        assert status.reason == (f"waiting for room inside job {job}'s budget "
                                 "(2 of 2 bundles in use)")
        status = await plane.status(fourth)  # fits after second ends, but third is first
        assert status.state is S.PENDING
        assert status.reason == f"behind {third} inside job {job}'s budget"
        # The job's queue is at its limit (2 GPUs, all the job's): its gangs count only
        # against the job, the book holds the job alone, and nothing else of the queue runs.
        assert [g.gang_id for g in plane.fleet.held()] == [job]
        for gang in (first, second, third, fourth):
            assert (await plane.wait(gang, timeout=10)).state is S.SUCCEEDED
        third_started = next(e.at for e in (await plane.status(third)).events
                             if e.to_state is S.RUNNING)
        fourth_started = next(e.at for e in (await plane.status(fourth)).events
                              if e.to_state is S.RUNNING)
        assert third_started <= fourth_started
        while [r.gang_id for r in plane.fleet] != [job]:  # torn down just after the end
            await asyncio.sleep(0.005)
        assert cluster.budgets[job].in_use() == 0
        assert sorted(n for n, _ in cluster.booked[job]) == sorted(
            (await plane.status(job)).nodes())  # the job holds its bundles again
        await plane.cancel(job)
        await released(plane)
        assert not cluster.booked
        await plane.shutdown()

    run(scenario)


def test_a_job_s_gangs_end_with_it_running_or_waiting():
    async def scenario():
        cluster = make_cluster("n0: GPU=2")
        plane = make_plane(cluster)
        job = await a_job(cluster, plane)
        running = await inside(plane, job, "running", "2xGPU=1", seconds=None)
        waiting = await inside(plane, job, "waiting", "1xGPU=1", seconds=None)
        await wait_for(plane, running, S.RUNNING)
        await plane.cancel(job, "stopped by user")
        for gang in (running, waiting):
            status = await plane.status(gang)
            assert status.state is S.CANCELLED
            assert moves(status)[-1][1] == f"its job {job} stopped (stopped by user)"
        await released(plane)
        assert not cluster.booked and not cluster.members.get(running)
        await plane.shutdown()

    run(scenario)


def test_a_gang_that_cannot_run_inside_its_job_is_refused_with_why():
    async def scenario():
        cluster = make_cluster("n0: GPU=4")
        plane = make_plane(cluster)
        job = await a_job(cluster, plane)
        with pytest.raises(UnschedulableError, match=r"can never be placed inside gang "
                           rf"{job}'s budget: 3 bundles asked, the budget has 2"):
            await inside(plane, job, "big", "3xGPU=1")
        with pytest.raises(UnschedulableError, match=r"do not fit the budget's bundles"):
            await inside(plane, job, "wide", "1xGPU=2")
        with pytest.raises(GangNotFoundError, match="unset RAYGANG_JOB_ID"):
            await inside(plane, "nojob-1234", "lost", "1xGPU=1")
        other = await submit(plane, "plain", "1xGPU=1", seconds=None)
        await wait_for(plane, other, S.RUNNING)
        with pytest.raises(UnschedulableError, match="not a running job"):
            await inside(plane, other, "x", "1xGPU=1")  # runs, but has no budget
        assert [r.gang_id for r in plane.registry] == [job, other]  # nothing kept
        await plane.shutdown()

    run(scenario)
