"""Resizes of an elastic gang against everything else that can happen meanwhile, at every
point of them, in virtual time: an urgent gang arriving while the gang grows, and the
control plane closed while a resize or a preemption is under way.

The book (the gang's record: its minimum, surplus and leaving members) and the cluster
(the members its run has, what is booked for it) must agree once the dust settles, and
nothing may be left waiting for ever or running after the plane is closed.
"""

from __future__ import annotations

import asyncio

import pytest

from raygang.control.memory import MemoryProgram
from raygang.control.program import RoleProgram
from raygang.core.gang import GangState as S
from raygang.core.spec import Resize, RoleSpec

from tests.control.harness import make_cluster, make_plane, released, run, submit, until
from tests.unit.builders import spec

START_S = 0.3  # each member's constructor: a growth by 3 takes about 1 s


async def elastic(plane, low: int, high: int, resize: Resize = Resize.LIVE) -> str:
    s = spec("e", "GPU=1", "PACK", resize=resize, preemption_grace_s=1.0).model_copy(
        update={"roles": (RoleSpec(name="w", replicas=(low, high), resources={"GPU": 1}),)})
    return await plane.submit(s, {"w": RoleProgram(target=MemoryProgram(
        seconds=None, on_preempt="hook", start_s=START_S))})


def book_and_cluster_agree(plane, cluster, gang_id: str) -> str | None:
    """None if the gang's record and the cluster agree on its members; else how not."""
    record = plane.registry.get(gang_id)
    spec = record.spec
    in_book = {s.name for s in spec.min_slots} | set(record.live.surplus) | set(record.live.leaving)
    running = {m.name for m in cluster.members.get(gang_id, []) if not m.dead}
    booked = {key.split("/", 1)[1] for key in cluster.booked if key.startswith(f"{gang_id}/")}
    booked |= {s.name for s in spec.min_slots} if gang_id in cluster.booked else set()
    if record.live.leaving or running != in_book or booked != in_book:
        return (f"book {sorted(in_book)} (leaving {sorted(record.live.leaving)}), running "
                f"{sorted(running)}, booked {sorted(booked)}")
    return None


async def settled(plane, cluster, gang_id: str, size: int, timeout: float = 20.0) -> None:
    """Until the gang runs at `size` and its book and the cluster agree."""
    record = plane.registry.get(gang_id)
    await until(lambda: record.state is S.RUNNING and record.size == size
                and book_and_cluster_agree(plane, cluster, gang_id) is None, timeout,
                lambda: f"size {record.size} (want {size}), {record.state.value}: "
                        f"{book_and_cluster_agree(plane, cluster, gang_id)}; events "
                        f"{[e.reason for e in record.events[-6:]]}")


async def urgent_during_growth(delay: float, resize: Resize) -> None:
    """A 1-to-4 gang starts at 1 and grows by 3 (about 1 s); `delay` into that growth, a
    3-GPU gang of a higher priority arrives: the growth is taken back (never the gang's
    minimum), the urgent gang runs, and afterwards the gang grows back."""
    cluster = make_cluster("n0: GPU=4")
    plane = make_plane(cluster)
    e = await elastic(plane, 1, 4, resize)
    record = plane.registry.get(e)
    await until(lambda: record.state is S.RUNNING and record.live.surplus, 10,
                lambda: f"never grew: {record.state.value}")
    await asyncio.sleep(delay)
    urgent = await submit(plane, "urgent", "3xGPU=1", priority=500, seconds=None)
    u = plane.registry.get(urgent)
    await until(lambda: u.state is S.RUNNING, 30,
                lambda: f"urgent {u.state.value}: {u.reason}; e: "
                        f"{[ev.reason for ev in record.events[-6:]]}")
    await settled(plane, cluster, e, 1)
    assert record.preemptions == 0 and u.restarts == 0
    assert not any("requeued" in ev.reason for ev in u.events), [ev.reason for ev in u.events]
    await plane.cancel(urgent)
    await settled(plane, cluster, e, 4)  # grown back
    await plane.cancel(e)
    await released(plane)
    assert cluster.booked == {} and cluster.members == {}


DELAYS = [i * 0.05 for i in range(0, 26)]  # from the growth's first moment to past its end


@pytest.mark.parametrize("resize", [Resize.LIVE, Resize.RESTART])
def test_an_urgent_gang_arriving_at_any_point_of_a_growth_runs_and_the_book_agrees(resize):
    for delay in DELAYS:
        run(lambda: urgent_during_growth(delay, resize), seed=round(delay * 100))


async def close_while(point: str) -> None:
    """Close the plane at `point` of an elastic gang's life; every task must end."""
    cluster = make_cluster("n0: GPU=4")
    plane = make_plane(cluster)
    resize = Resize.RESTART if point == "restart resize" else Resize.LIVE
    e = await elastic(plane, 1, 4, resize)
    record = plane.registry.get(e)
    await until(lambda: record.state is S.RUNNING and record.live.surplus, 10, lambda: "no growth")
    if point == "preemption":
        await until(lambda: record.size == 4 and not plane.fleet.driver(e)._resizes, 10,
                    lambda: "growth did not end")
        await submit(plane, "urgent", "4xGPU=1", priority=500, seconds=None)
        await until(lambda: record.live.stopping is not None, 10, lambda: "not preempted")
    await asyncio.sleep(0.1)  # in the middle of it
    loop = asyncio.get_running_loop()
    started = loop.time()
    stuck = await plane.close(1.0)
    assert not stuck, f"{point}: tasks did not end when cancelled: {stuck}"
    assert loop.time() - started < 1.0
    assert not plane.tasks


@pytest.mark.parametrize("point", ["live resize", "restart resize", "preemption"])
def test_closing_the_plane_during_a_resize_or_a_preemption_ends_every_task(point):
    for seed in range(5):
        run(lambda: close_while(point), seed=seed)


async def gang_cancelled_during_growth(delay: float) -> None:
    """An urgent gang is admitted into room an elastic gang's growth would give back; the
    elastic gang is cancelled before that removal had its turn: the urgent gang must
    not wait for a removal that will never run (what was reserved is freed with the
    gang)."""
    cluster = make_cluster("n0: GPU=4")
    plane = make_plane(cluster)
    e = await elastic(plane, 1, 4)
    record = plane.registry.get(e)
    await until(lambda: record.state is S.RUNNING and record.live.surplus, 10, lambda: "no growth")
    urgent = await submit(plane, "urgent", "3xGPU=1", priority=500, seconds=None)
    await until(lambda: record.live.leaving, 10, lambda: "not shrunk")
    await asyncio.sleep(delay)
    await plane.cancel(e)
    u = plane.registry.get(urgent)
    await until(lambda: u.state is S.RUNNING, 10, lambda: f"urgent {u.state.value}: {u.reason}")
    await plane.cancel(urgent)
    await released(plane)
    assert cluster.booked == {} and cluster.members == {}


def test_a_gang_admitted_into_a_growth_being_taken_back_runs_when_the_grower_is_cancelled():
    for step in range(10):
        run(lambda: gang_cancelled_during_growth(step * 0.1), seed=step)
