"""A line's runs (`core.backlog.run_starts`) are worked out once per line, not once per
pass or cycle: a pass that admits nothing leaves them standing, and a cycle hands back
those of a line read as given, so that the next cycle on the same line reads them
(issue 30: a simulator fast enough to sweep). Both decide as working them out anew."""

from __future__ import annotations

import dataclasses

from raygang.core import schedule
from raygang.core import backlog as backlog_module
from raygang.core.backlog import Backlog, Line, run_starts

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
    assert line.run_end(0) == 8 and calls == [9, 8]
    assert kept == [[9]]  # runs of a line less a gang are not the given line's
    fresh = Line(gangs, keep=kept.append)
    fresh.drop(9, {"g0"})  # admitted before any run was read: not the line as given
    assert fresh.run_end(0) == 8 and kept == [[9]]


def test_runs_given_are_read_not_worked_out_and_are_those_worked_out(monkeypatch):
    gangs = [gang(f"g{i}", "2xGPU=1" if i < 4 else "1xGPU=1", since=0.0) for i in range(7)]
    calls = _counting(monkeypatch)
    line = Line(gangs, [4, 7], keep=lambda starts: calls.append(-1))
    assert (line.run_end(2), line.run_end(4)) == (4, 7) and calls == []
    assert run_starts(gangs) == [4, 7]


def test_runs_kept_from_one_cycle_decide_as_runs_worked_out_anew(monkeypatch):
    """Each case's cycle is run three times: working every run out, handing back what it
    worked out for lines as given, then reading those: the same plans, and the third
    reads fewer gangs (none, but for lines a pass changed)."""
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
