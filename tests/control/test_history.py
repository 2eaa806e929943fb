"""The status page's history: a bounded ring of per-queue samples (pending, running, GPUs
against the guarantee) the loop takes every `interval_s`, parents summing their children,
read whole or for the queues a token may see."""

from __future__ import annotations

import asyncio

from raygang.control.history import History
from raygang.core import QueueSpec
from raygang.core.gang import GangState as S

from tests.control.harness import make_cluster, make_plane, run, submit, wait_for

QUEUES = [QueueSpec(name="org", quota={"GPU": 4}),
          QueueSpec(name="team", parent="org", quota={"GPU": 2}), QueueSpec(name="other")]


def test_the_ring_samples_each_interval_and_keeps_only_the_last_hours():
    async def scenario():
        history = History(interval_s=1.0, kept_s=5.0)
        plane = make_plane(make_cluster("n0: GPU=4 CPU=8"), history=history, queues=QUEUES)
        running = await submit(plane, "big", "3xGPU=1", queue="team", seconds=30)
        await wait_for(plane, running, S.RUNNING)
        await submit(plane, "waits", "2xGPU=1", queue="team", seconds=0.1)
        await asyncio.sleep(3.5)
        view = await plane.history()
        assert view.interval_s == 1.0 and 3 <= len(view.points) <= 5
        gaps = [b.at - a.at for a, b in zip(view.points, view.points[1:])]
        # The loop looks at every pass (every 0.05 s here) and samples once a second.
        assert all(0.99 <= g <= 1.5 for g in gaps), gaps
        last = view.points[-1].queues
        assert (last["team"].pending, last["team"].running) == (1, 1)
        assert (last["team"].gpus, last["team"].guarantee) == (3, 2)
        assert (last["org"].pending, last["org"].running, last["org"].gpus) == (1, 1, 3)
        assert (last["other"].running, last["other"].gpus, last["other"].guarantee) == (0, 0, 0)
        await asyncio.sleep(6)
        assert len((await plane.history()).points) == 5  # the ring: 5 s of 1 s points
        only = await plane.history(["team"])
        assert {q for p in only.points for q in p.queues} == {"team"}
        await plane.shutdown()

    run(scenario)


def test_a_plane_without_a_history_answers_an_empty_one():
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=4"))
        assert (await plane.history()).points == []
        await plane.shutdown()

    run(scenario)
