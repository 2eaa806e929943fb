"""A line's runs (`core.backlog.run_starts`) are worked out once, not once per pass or
cycle: a pass that admits nothing leaves them standing, one that admits moves them, a
cycle hands back those of a line read as given, and its keeper moves them as gangs join
and leave, so that the next cycle reads them (issue 30: a simulator fast enough to
sweep). All of it decides as working them out anew."""

from __future__ import annotations

import dataclasses
import random

from raygang.core import schedule
from raygang.core import backlog as backlog_module
from raygang.core.backlog import (Backlog, Line, run_starts, runs_after_insert,
                                   runs_after_removing)

from tests.unit.builders import gang
from tests.unit.test_cycle_shortcuts import _lines_with_runs


def _counting(monkeypatch) -> list[int]:
    """Patches `run_starts` to count the gangs it reads per call."""
    calls: list[int] = []

    def counted(gangs):
        calls.append(len(gangs))
        return run_starts(gangs)
    monkeypatch.setattr(backlog_module, "run_starts", counted)
    return calls


def test_a_pass_that_admits_nothing_leaves_the_runs_standing(monkeypatch):
    calls = _counting(monkeypatch)
    gangs = [gang(f"g{i}", "2xGPU=1", since=float(i // 3)) for i in range(9)]
    kept: list[list[int]] = []
    line = Line(gangs, keep=kept.append)
    assert line.run_end(0) == 9 and calls == [9] and kept == [[9]]
    line.drop(4, set())  # looked at four, admitted none (another queue's admission aside)
    line.drop(9, {"elsewhere"})
    assert line.run_end(5) == 9 and calls == [9]  # the same line: no new reading
    line.drop(9, {"g4"})
    assert [g.gang_id for g in line] == [f"g{i}" for i in range(9) if i != 4]
    assert line.run_end(0) == 8 and calls == [9]  # the runs followed the admission
    assert kept == [[9]]  # runs of a line less a gang are not the given line's
    fresh = Line(gangs, keep=kept.append)
    fresh.drop(9, {"g0"})  # admitted before any run was read: not the line as given
    assert fresh.run_end(0) == 8 and kept == [[9]] and calls == [9, 8]


def test_runs_given_are_read_not_worked_out_and_are_those_worked_out(monkeypatch):
    gangs = [gang(f"g{i}", "2xGPU=1" if i < 4 else "1xGPU=1", since=0.0) for i in range(7)]
    calls = _counting(monkeypatch)
    line = Line(gangs, [4, 7], keep=lambda starts: calls.append(-1))
    assert (line.run_end(2), line.run_end(4)) == (4, 7) and calls == []
    assert run_starts(gangs) == [4, 7]


def test_runs_kept_from_one_cycle_decide_as_runs_worked_out_anew(monkeypatch):
    """Each case's cycle is run three times: working every run out, handing back what it
    worked out for lines as given, then reading those: the same plans, and the third
    reads far fewer gangs (only where runs could not be kept or moved: a line less the
    gangs it can never admit, a line of runs of one gang each)."""
    calls = _counting(monkeypatch)
    read_anew = read_kept = 0
    for seed in range(200):
        snapshot, pending, config = _lines_with_runs(seed)
        backlog = Backlog.of(pending)
        kept: dict[str, list[int]] = {}
        calls.clear()
        plan = schedule(snapshot, dataclasses.replace(backlog, keep_runs=kept.__setitem__),
                        config, 4000.0)
        read_anew += sum(calls)
        for queue, starts in kept.items():
            assert starts == run_starts(list(backlog.lines[queue])), seed
        calls.clear()
        again = schedule(snapshot, dataclasses.replace(backlog, runs=kept), config, 4000.0)
        read_kept += sum(calls)
        assert again == plan, seed
        assert again == schedule(snapshot, backlog, config, 4000.0), seed
    assert read_anew > 1000 and read_kept < read_anew / 2


def test_runs_follow_a_gang_that_joins_or_leaves_as_worked_out_anew():
    """`runs_after_insert` and `runs_after_removing` against `run_starts` of the line as it
    is after each of many random joins and leaves (one gang, or a few at once;
    kinds, waits and unknown waits)."""
    rng = random.Random(7)
    kinds = [("2xGPU=1", 0), ("2xGPU=1", 5), ("1xGPU=1", 0)]
    followed = 0
    for case in range(60):
        line: list = []
        starts = run_starts(line)
        for step in range(60):
            if line and rng.random() < 0.4:
                gone = sorted(rng.sample(range(len(line)), rng.randint(1, min(3, len(line)))))
                moved = runs_after_removing(starts, line, gone)
                line = [g for at, g in enumerate(line) if at not in gone]
            else:
                shape, priority = rng.choice(kinds)
                since = None if rng.random() < 0.02 else float(rng.randint(0, 6))
                i = rng.randint(0, len(line))
                new = gang(f"c{case}-{step}", shape, priority=priority, since=since)
                moved = runs_after_insert(starts, line, i, new)
                line.insert(i, new)
            starts = run_starts(line)
            if moved is not None:
                assert moved == starts, (case, step)
                followed += 1
    assert followed > 1500


def test_a_line_s_runs_follow_each_pass_s_admissions_as_worked_out_anew():
    """Passes that look at part of a line or all of it, and admit some of what they
    looked at (or gangs of other lines): the runs each answers are those of the line
    it is now, worked out anew."""
    rng = random.Random(11)
    kinds = ["2xGPU=1", "1xGPU=1"]
    for case in range(150):
        gangs = [gang(f"d{case}-{i}", rng.choice(kinds), since=float(rng.randint(0, 4)))
                 for i in range(rng.randint(1, 30))]
        line = Line(gangs)
        line.run_end(0)  # the runs are known before the first pass
        while len(line):
            looked = rng.randint(0, len(line))
            seen = [g.gang_id for g in list(line)[:looked]]
            admitted = set(rng.sample(seen, rng.randint(0, min(3, len(seen))))) | {"other"}
            line.drop(looked, admitted)
            anew = Line(list(line))
            assert [line.run_end(i) for i in range(len(line))] == \
                [anew.run_end(i) for i in range(len(line))], case
            if not admitted - {"other"} and looked == len(line):
                break
