"""The registry's indexes answer what a walk over every gang would (pages, counts, lines)."""

from __future__ import annotations

import random

import pytest

from raygang.control.records import GangRecord
from raygang.control.registry import Registry
from raygang.core.backlog import run_starts
from raygang.core.gang import GangState as S
from raygang.core.lifecycle import Move, Outcome

from tests.unit.builders import spec

QUEUES = ["a", "b", "c"]
MOVES = {S.PENDING: [S.ADMITTED, S.CANCELLED], S.ADMITTED: [S.RESERVED, S.PENDING],
         S.RESERVED: [S.STARTING], S.STARTING: [S.RUNNING, S.FAILED],
         S.RUNNING: [S.SUCCEEDED, S.FAILED, S.PREEMPTED], S.PREEMPTED: [S.PENDING]}


def book(seed: int, n: int = 300) -> tuple[Registry, list[GangRecord]]:
    rng = random.Random(seed)
    now = [1000.0]
    registry = Registry(finished_kept=rng.choice([20, 10_000]), clock=lambda: now[0])
    records = []
    for i in range(n):
        record = GangRecord(f"g-{i:04d}", spec(f"g{i}", rng.choice(["GPU=1", "2xGPU=1"]),
                                               queue=rng.choice(QUEUES)),
                            {}, priority=rng.choice([10, 100, 1000]), seq=registry.next_seq(),
                            submitted_at=float(i),
                            kind=rng.choice(["gang", "gang", "job"]))
        registry.add(record)
        records.append(record)
        if rng.random() < 0.9:
            record.live.saved = True
            registry.changed(record)
        for _ in range(rng.randint(0, 4)):  # a random walk through the lifecycle
            if record.state.finished or record.state not in MOVES:
                break
            to = rng.choice(MOVES[record.state])
            record.apply(Outcome((Move(to, "test"),)), now[0])
            registry.changed(record)  # as the plane is told of every change
            if to.finished:
                registry.finished(record)
        if record.state is S.PENDING and rng.random() < 0.1:  # in a restart backoff
            record.not_before = now[0] + rng.choice([-1, 5])
            registry.changed(record)
    return registry, records


def brute(records, registry, state, queues):
    return [r for r in records if r.gang_id in registry
            and (state is None or r.state is state) and (queues is None or r.spec.queue in queues)]


@pytest.mark.parametrize("seed", range(8))
def test_pages_and_counts_match_a_walk_over_every_gang(seed):
    registry, records = book(seed)
    rng = random.Random(seed)
    for _ in range(60):
        state = rng.choice([None, S.PENDING, S.RUNNING, S.SUCCEEDED, S.CANCELLED])
        queues = rng.choice([None, ["a"], ["a", "c"], ["b", "c", "x"]])
        offset, limit, newest = rng.randint(0, 50), rng.randint(1, 40), rng.random() < 0.5
        want = brute(records, registry, state, queues)
        page, total = registry.page(state, queues, offset, limit, newest)
        assert total == len(want)
        ordered = list(reversed(want)) if newest else want
        assert [r.gang_id for r in page] == [r.gang_id for r in ordered[offset:offset + limit]]
    counts = registry.counts()
    for state in S:
        for queue in QUEUES:
            assert counts[state, queue] == len(brute(records, registry, state, [queue]))


@pytest.mark.parametrize("seed", range(8))
def test_the_backlog_holds_exactly_the_gangs_a_cycle_may_admit(seed):
    registry, records = book(seed)
    backlog = registry.backlog(1000.0)
    due = [r for r in records if r.gang_id in registry and r.state is S.PENDING and r.live.saved
           and r.cancel_reason is None and (r.not_before is None or r.not_before <= 1000.0)]
    lines = {q: [g.gang_id for g in line] for q, line in backlog.lines.items()}
    want: dict[str, list[str]] = {}
    for r in sorted(due, key=lambda r: r.pending_view().order_key()):
        want.setdefault(r.spec.queue, []).append(r.gang_id)
    assert lines == want
    for queue, line in backlog.lines.items():
        assert sum(backlog.totals[queue].values()) == len(line)
    later = registry.backlog(1010.0)  # the backoffs are over: those gangs join
    assert len(later) >= len(backlog)
    assert len(later) == len([r for r in records if r.gang_id in registry
                              and r.state is S.PENDING and r.live.saved and r.cancel_reason is None])


@pytest.mark.parametrize("seed", range(8))
def test_what_waits_per_queue_and_the_jobs_match_a_walk_over_every_gang(seed):
    registry, records = book(seed)
    want: dict[str, dict] = {}
    for r in registry.pending():
        gang = r.pending_view()
        counts = want.setdefault(gang.queue, {})
        counts[gang.total] = counts.get(gang.total, 0) + 1
    assert registry.pending_totals() == want
    for state in (None, S.PENDING, S.RUNNING, S.SUCCEEDED):
        assert [r.gang_id for r in registry.jobs(state)] == \
            [r.gang_id for r in brute(records, registry, state, None) if r.kind == "job"]


@pytest.mark.parametrize("seed", range(8))
def test_the_runs_a_backlog_hands_out_are_those_of_its_lines_now(seed):
    """A cycle hands back the runs it worked out for a line (`core.backlog.Backlog`); the
    next backlog hands them out while that line is unchanged, and an answer for a line
    that changed after its backlog was taken is not kept. (The registry takes them in when
    asked for the next backlog, in the loop's thread, not from the cycle's.)"""
    registry, records = book(seed)
    rng = random.Random(seed)
    handed = 0
    for step in range(40):
        backlog = registry.backlog(1000.0)
        for queue, starts in backlog.runs.items():
            assert starts == run_starts(list(backlog.lines[queue])), (step, queue)
            handed += 1
        now, later = [], []
        for queue in backlog.lines:
            (now if rng.random() < 0.5 else later).append(queue)
        for queue in now:  # answered before the lines change
            backlog.keep_runs(queue, run_starts(list(backlog.lines[queue])))
        for _ in range(rng.randint(0, 2)):  # gangs come and go meanwhile
            waiting = [r for r in registry.pending() if r.live.saved]
            if waiting and rng.random() < 0.6:
                record = rng.choice(waiting)
                record.apply(Outcome((Move(S.ADMITTED, "test"),)), 1000.0)
                registry.changed(record)
            else:
                i = len(records)
                record = GangRecord(f"g-{i:04d}", spec(f"g{i}", "GPU=1",
                                                       queue=rng.choice(QUEUES)),
                                    {}, priority=100, seq=registry.next_seq(),
                                    submitted_at=float(i))
                registry.add(record)
                record.live.saved = True
                registry.changed(record)
                records.append(record)
        for queue in later:  # answered after: kept only where the line did not change
            backlog.keep_runs(queue, run_starts(list(backlog.lines[queue])))
    assert handed > 40
