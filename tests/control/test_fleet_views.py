"""What the fleet hands a cycle of the gangs it holds (`Fleet.held`): the same views while
nothing they read changed, fresh ones as soon as a record changes, in the drivers' order."""

from __future__ import annotations

import asyncio

from raygang.core.gang import GangState as S

from tests.control.harness import make_cluster, make_plane, run, submit, wait_for


def fresh(plane) -> tuple:
    """The views as every held record gives them now (what held() must equal)."""
    return tuple(r.placed_view() for r in plane.fleet if r.parent is None)


def test_held_views_are_kept_while_nothing_changes_and_follow_every_change():
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=4 CPU=8", "n1: GPU=4 CPU=8"))
        await plane.ready()
        first = await submit(plane, "a", "2xGPU=1", seconds=30)
        second = await submit(plane, "b", "2xGPU=1", seconds=30)
        await wait_for(plane, first, S.RUNNING)
        await wait_for(plane, second, S.RUNNING)
        held = plane.fleet.held()
        assert held == fresh(plane) and [g.gang_id for g in held] == [first, second]
        assert plane.fleet.held() is held  # nothing changed: the very same tuple
        record = plane.registry.get(first)
        running_since = held[0].running_since
        # A change of what a view reads (here a restart's new start time, by hand) is
        # seen at once, and only that gang's view is made again.
        record.started_at = running_since + 1.0
        again = plane.fleet.held()
        assert again is not held and again == fresh(plane)
        assert again[0].running_since == running_since + 1.0 and again[1] is held[1]
        record.live.stopping = "preempted by a test"
        assert plane.fleet.held()[0].draining
        record.live.stopping = None
        await plane.cancel(second)
        await wait_for(plane, second, S.CANCELLED)
        await asyncio.sleep(1.0)
        assert [g.gang_id for g in plane.fleet.held()] == [first] == \
            [g.gang_id for g in fresh(plane)]
    run(scenario)
