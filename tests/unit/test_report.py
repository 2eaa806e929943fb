"""queue_report(): what `raygang.queues()` shows, parents first, counts up the tree."""

from __future__ import annotations

import pytest

from raygang.core import PolicyConfig
from raygang.core.backlog import Backlog
from raygang.core.report import queue_report

from tests.unit.builders import busy, gang, queue, res, running


def test_queue_report_counts_usage_pending_and_fair_share_up_the_tree():
    config = PolicyConfig(queues=[
        queue("org", quota="GPU=8"), queue("a", "org", quota="GPU=4", limit="GPU=6"),
        queue("b", "org"),
    ])
    snapshot = busy("w-1: GPU=8", "w-2: GPU=8",
                    placed=[running("t1", "w-1: 4xGPU=1", queue="a"),
                            running("t2", "w-2: 2xGPU=1", queue="b")])
    pending = [gang("p1", "2xGPU=1", queue="b"), gang("p2", "GPU=1", queue="b")]
    totals = Backlog.of(pending).totals
    rows = {r.name: r for r in queue_report(snapshot, totals, config)}
    assert [r.name for r in queue_report(snapshot, totals, config)][0] in ("default", "org")
    org, a, b = rows["org"], rows["a"], rows["b"]
    assert (org.usage, org.running, org.pending, org.leaf) == (res("GPU=6"), 2, 2, False)
    assert (a.usage, a.limit, a.pending) == (res("GPU=4"), res("GPU=6"), 0)
    assert (b.usage, b.pending, b.running) == (res("GPU=2"), 2, 1)
    # demand: a 4, b 2 + 3 = 5; org gets 9 (its 8 quota + all the rest nobody else wants)
    assert org.fair_share["GPU"] == pytest.approx(9)
    assert a.fair_share["GPU"] == pytest.approx(4) and b.fair_share["GPU"] == pytest.approx(5)
    assert b.share_ratio == pytest.approx(2 / 5)
