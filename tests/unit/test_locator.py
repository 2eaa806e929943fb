"""`core.backlog.Locator`: a waiting gang's place in a cycle's lines, by bisecting for a
few lookups and from one index past `INDEX_AFTER` of them (a list of every status). Both
ways answer alike, also for a gang that moved in line since the cycle (its priority) and
for one the cycle never saw."""

from __future__ import annotations

import random

from raygang.core.backlog import Backlog, Locator

from tests.unit.builders import gang


def test_the_bisect_and_the_index_answer_alike_for_every_gang():
    rng = random.Random(3)
    gangs = [gang(f"g{i}", rng.choice(["GPU=1", "2xGPU=1", "GPU=4"]),
                  priority=rng.choice([0, 100, 500]), queue=rng.choice(["a", "b", "c"]))
             for i in range(300)]
    backlog = Backlog.of(gangs)
    now = {g.gang_id: g for g in gangs}
    moved = gangs[17]  # its priority changed after the cycle: not where the cycle saw it
    now[moved.gang_id] = gang(moved.gang_id, "GPU=1", priority=900, queue=moved.spec.queue)
    asked = [g.gang_id for g in gangs] + ["unknown"]

    bisecting = Locator(backlog.lines, now.get)
    bisecting.INDEX_AFTER = len(asked) + 1
    indexing = Locator(backlog.lines, now.get)
    indexing.INDEX_AFTER = 0
    by_bisect = [bisecting(gang_id) for gang_id in asked]
    by_index = [indexing(gang_id) for gang_id in asked]

    assert by_bisect == by_index
    assert by_index[17] is None and by_index[-1] is None
    for where, g in zip(by_index[:-1], gangs):
        if g is not moved:
            queue, i, seen = where
            assert (queue, seen) == (g.spec.queue, g)
            assert backlog.lines[queue][i] is g
    assert indexing._index is not None and bisecting._index is None
