"""Train's group handed back to raygang (`TrainDesk.adopt`): where its bundles are is read
from the GCS in a thread, so an outage (Ray's read then waits for the GCS) never holds the
scheduler's event loop; the check of that read against the nodes handed over is pure
(`check_group`). The GCS read is replaced here by one that blocks as Ray's does; the real
outage: tests/integration/test_gcs_outage.py."""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from raygang.core.resources import Resources
from raygang.runtime.handoff import train
from raygang.runtime.handoff.budget import Budget, HandoffFailed, check_group
from raygang.runtime.scheduler import train_desk

GROUP = "ab" * 14


def test_a_group_placed_on_the_nodes_handed_over_is_booked_node_by_node():
    assert check_group(GROUP, ["n1", "n2", "n1"], ["n2", "n1", "n1"]) == ["n1", "n2", "n1"]


@pytest.mark.parametrize(("placed", "reason"), [
    (None, "is not placed"),  # unknown or removed
    (["n1", None], "is not placed"),  # a bundle still waiting
    (["n1", "n1"], "more bundles on node n1"),  # one node over what it was handed
    (["n3", "n1"], "more bundles on node n3"),  # a node never handed over
])
def test_a_group_not_placed_or_placed_beyond_the_hand_over_fails_with_the_reason(
        placed, reason):
    with pytest.raises(HandoffFailed, match=reason):
        check_group(GROUP, placed, ["n1", "n2"])


def test_reading_where_the_group_is_never_holds_the_loop(monkeypatch):
    answer, asked = threading.Event(), threading.Event()

    def gcs_down(pg_id):  # as Ray's read does while the GCS is down
        asked.set()
        answer.wait(10)
        return ["n1", "n2"]

    monkeypatch.setattr(train_desk, "group_nodes", gcs_down)
    budget = Budget("job/1", [Resources(GPU=1)] * 2, ["n1", "n2"], timeout_s=60)
    session = train.TrainSession("job/1", [Resources(GPU=1)] * 2, budget, lease_s=60,
                                 controller_id=None)
    session.nodes = ["n1", "n2"]
    desk = train_desk.TrainDesk(plane=None, cluster=SimpleNamespace(sessions={"job/1": session}))

    async def scenario():
        adopting = asyncio.create_task(desk.adopt("job/1", GROUP))
        ticks = 0
        while not asked.is_set() or ticks < 5:  # the loop runs on while the read waits
            await asyncio.sleep(0.01)
            ticks += 1
        assert not adopting.done()
        answer.set()
        return await adopting

    assert asyncio.run(scenario()) == ["n1", "n2"]
    assert session.adopted.is_set() and session.pg_id == GROUP


def test_no_read_for_a_hand_over_that_is_not_under_way(monkeypatch):
    monkeypatch.setattr(train_desk, "group_nodes", lambda pg_id: pytest.fail("read the GCS"))
    desk = train_desk.TrainDesk(plane=None, cluster=SimpleNamespace(sessions={}))
    with pytest.raises(Exception, match="no Train hand-off job/9 under way"):
        asyncio.run(desk.adopt("job/9", GROUP))
