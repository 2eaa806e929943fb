"""`core.backlog.Locator`: a waiting gang's place in a cycle's lines, by bisecting for a
few lookups and from one index past `INDEX_AFTER` of them (a list of every status). Both
ways answer alike, also for a gang that moved in line since the cycle (its priority) and
for one the cycle never saw. And what a line keeps from one pass to the next (`Line`)."""

from __future__ import annotations

import random

from raygang.core.backlog import Backlog, Line, Locator

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


def test_a_line_forgets_the_admitted_among_the_gangs_a_pass_looked_at_and_keeps_the_rest():
    """`core.backlog.Line`: a pass looks at the first gangs of a line; the next pass sees
    those it did not admit, then the rest, also where it looks at fewer than the last."""
    gangs = [gang(f"g{i}", "GPU=1") for i in range(6)]
    line = Line(gangs)
    line.drop(3, admitted={"g1"})  # looked at g0-g2
    assert [g.gang_id for g in line] == ["g0", "g2", "g3", "g4", "g5"]
    line.drop(1, admitted={"g0"})  # looked at g0 only: g2 stays ahead of the rest
    assert [g.gang_id for g in line] == ["g2", "g3", "g4", "g5"]
    line.drop(3, admitted={"g4"})  # g2 from the head, then g3 and g4 of the given line
    assert [g.gang_id for g in line] == ["g2", "g3", "g5"]
    assert len(line) == 3 and line[2].gang_id == "g5"
    line.drop(3, admitted=set())
    assert [g.gang_id for g in line] == ["g2", "g3", "g5"] and line.tail is gangs
