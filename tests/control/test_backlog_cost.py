"""What a fresh gang costs the scheduler does not depend on how many gangs wait elsewhere.

Counted in operations, not time (the lines of raygang's code that run, as Python's tracer
sees them): a gang in one queue, from its submission until it has run and the loops have
looked again, and meanwhile what the status page asks every 2 s (the queues, the jobs,
the cluster), behind 20 and then 600 gangs that a limit holds in another queue.

- With scaling on, the scale step after each cycle sizes the cluster to what waits: it
  looks at the gangs more nodes could help, and a line held by a queue limit is none of
  them (it skips it whole; it walked it, and asked nodes for it, before).
- The queue view counts what waits from the registry's totals per queue, and the jobs
  are an index of their own (both walked every gang before).
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

from raygang.control.status import ScalingStatus
from raygang.core import QueueSpec
from raygang.core.gang import GangState as S, PendingGang
from raygang.core.scale import NodeGroup, ScalePlan, ScalePolicy, plan_scale
from raygang.core.snapshot import ClusterSnapshot

import raygang
from tests.control.harness import make_cluster, make_plane, run, submit, wait_for
from tests.unit.builders import res

QUEUES = [QueueSpec(name="default"), QueueSpec(name="held", limit={"GPU": 1}),
          QueueSpec(name="fresh")]
RAYGANG = str(Path(raygang.__file__).parent)


class Operations:
    """Counts the lines of raygang's code that run while it is on (one thread: the
    virtual-time loop runs a cycle's thread inline)."""

    def __init__(self) -> None:
        self.lines = 0

    def _call(self, frame: FrameType, event: str, arg: Any):
        return self._line if frame.f_code.co_filename.startswith(RAYGANG) else None

    def _line(self, frame: FrameType, event: str, arg: Any):
        if event == "line":
            self.lines += 1
        return self._line

    def __enter__(self) -> Operations:
        sys.settrace(self._call)
        return self

    def __exit__(self, *exc: object) -> None:
        sys.settrace(None)


class PlanningScaling:
    """The scaling port as far as deciding goes: each step plans (`core.plan_scale`) for
    one worker group; no node is ever added."""

    def __init__(self) -> None:
        self.requested: dict = {}
        self.draining: dict[str, float] = {}
        self.groups = [NodeGroup("gpu4", res("GPU=4 CPU=8"), max_nodes=50)]
        self.fresh: dict = {}
        self.asked: list[int] = []  # per step: how many gangs it planned nodes for

    async def step(self, observe: Callable[[], ClusterSnapshot], waiting: Sequence[PendingGang],
                   busy_nodes: Collection[str],
                   planned: Callable[[], None] | None = None) -> ScalePlan | None:
        self.asked.append(len(waiting))
        plan = plan_scale(observe(), waiting, self.groups, {}, {}, busy_nodes, ScalePolicy(), 0.0)
        if planned is not None:
            planned()
        return plan

    def note(self, gang_id: str) -> str | None:
        return None

    def status(self) -> ScalingStatus:
        return ScalingStatus(mode="test")


async def fresh_gang_cost(waiting: int, scaling: PlanningScaling | None) -> int:
    cluster = make_cluster("n0: GPU=4 CPU=8", "n1: GPU=4 CPU=8")
    plane = make_plane(cluster, scaling=scaling, queues=QUEUES, resync_interval_s=1.0)
    plane.start()
    for i in range(waiting + 1):  # one runs, `waiting` wait behind the limit
        await submit(plane, f"held{i}", "GPU=1", queue="held", seconds=3600)
    await asyncio.sleep(2.0)  # every one decided on
    with Operations() as operations:
        gang_id = await submit(plane, "fresh", "CPU=1", queue="fresh", seconds=0.5)
        await wait_for(plane, gang_id, S.SUCCEEDED)
        for _ in range(2):  # the loops look again (resync cycles, scale steps); a status
            await asyncio.sleep(1.0)  # page asks what it shows
            await asyncio.gather(plane.queues(), plane.list_jobs(), plane.cluster())
    return operations.lines


@pytest.mark.parametrize("scaling", [False, True], ids=["scaling off", "scaling on"])
def test_a_fresh_gang_costs_the_same_behind_20_or_600_waiting_gangs(scaling):
    planners = [PlanningScaling() if scaling else None for _ in range(2)]
    few, many = (run(lambda: fresh_gang_cost(n, p), virtual_s=600)
                 for n, p in zip((20, 600), planners))
    assert many <= 1.1 * few, f"{few} lines run behind 20 waiting gangs, {many} behind 600"
    if scaling:  # and no step planned nodes for a gang the limit holds
        assert set(planners[1].asked) == {0}, planners[1].asked
