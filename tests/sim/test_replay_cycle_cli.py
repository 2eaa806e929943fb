"""`raygang sim --replay-cycle FILE`: the plan printed, the comparison with the recorded
plan as the exit status, and a bad file as one error line (exit 2). The dumps are made by
`core.cycle_dump` here; tests/e2e/test_debug_cycle_rest.py replays one from the API."""

from __future__ import annotations

import json

import pytest

from raygang.cli.main import main
from raygang.core import PolicyConfig, QueueSpec, schedule
from raygang.core.backlog import Backlog
from raygang.core.cycle_dump import dump_cycle

from tests.unit.builders import busy, gang, running

CONFIG = PolicyConfig(queues=[QueueSpec(name="default"), QueueSpec(name="q", limit={"GPU": 1})],
                      backfill_lookahead=0)  # strict FIFO per queue


def a_dump() -> dict:
    """An inference gang preempts a batch gang on w-1 and takes w-2 too; queue q is at its
    limit: its first gang waits for it, the second behind the first."""
    snapshot = busy("w-1: GPU=4 CPU=8", "w-2: GPU=4 CPU=8", "w-3: GPU=2 CPU=8",
                    placed=[running("low", "w-1: 4xGPU=1", priority=10),
                            running("q-0", "w-3: GPU=1", queue="q")])
    pending = [gang("serve", "8xGPU=1", priority="inference", seq=0, config=CONFIG),
               gang("q-1", "GPU=1", queue="q", seq=1), gang("q-2", "GPU=1", queue="q", seq=2)]
    backlog = Backlog.of(pending)
    return dump_cycle(snapshot, backlog, CONFIG, 100.0, schedule(snapshot, backlog, CONFIG, 100.0))


def replay(path, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        main(["sim", "--replay-cycle", str(path)])
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def test_a_replay_prints_the_plan_and_says_it_is_the_one_recorded(tmp_path, capsys):
    path = tmp_path / "cycle.json"
    path.write_text(json.dumps(a_dump()))
    code, out, err = replay(path, capsys)
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "cycle at 1970-01-01 00:01:40 UTC (now=100.000): 3 nodes (3 alive), 2 gangs holding "
        "capacity, 3 gangs pending in 2 queues; actions allocate, shrink, reclaim, preempt, "
        "grow, backfill off per queue",
        "admitted (1):",
        "  serve by preempt on w-1 x4, w-2 x4; stopping low",
        "preempted (1):",
        "  low for serve by preempt: preempted for gang serve (priority 1000 > 10)",
        "waiting (2):",
        "  q #1 q-1 LIMIT: queue 'q' is at its limit: uses GPU 1 of 1, the gang needs 1 more",
        "  q #2 q-2 BEHIND: waiting behind gang q-1 (priority 0, earlier in queue 'q'; "
        "backfill is off), which cannot start yet: queue 'q' is at its limit: uses GPU 1 of "
        "1, the gang needs 1 more",
        "",
        "same plan as the scheduler made",
    ]


def test_a_replay_that_differs_names_the_first_difference(tmp_path, capsys):
    dump = a_dump()
    dump["plan"]["waiting"]["q-2"]["message"] = "edited"
    path = tmp_path / "cycle.json"
    path.write_text(json.dumps(dump))
    code, out, _ = replay(path, capsys)
    assert code == 1
    assert out.splitlines()[-1].startswith(
        "differs from the plan the scheduler made: plan.waiting['q-2'].message: recorded "
        "'edited', replayed \"waiting behind gang q-1 (priority 0")


@pytest.mark.parametrize("content, error", [
    (None, "error: cannot read {path}: No such file or directory"),
    ("{}", "error: {path}: format: missing: not a raygang cycle dump (expected format "
           "'raygang.cycle/1', as GET /v1/debug/cycle writes)"),
    ('{"format": "raygang.cycle/2"}', "error: {path}: format: 'raygang.cycle/2' is not a "
     "format this raygang reads (it reads 'raygang.cycle/1'); replay it with the raygang "
     "that dumped it"),
    ("not json", "error: {path}: not JSON: Expecting value: line 1 column 1 (char 0)"),
])
def test_a_bad_file_is_one_error_line_and_exit_2(tmp_path, capsys, content, error):
    path = tmp_path / "cycle.json"
    if content is not None:
        path.write_text(content)
    code, out, err = replay(path, capsys)
    assert (code, out) == (2, "")
    assert err == error.format(path=path) + "\n"


def test_a_trace_and_a_cycle_together_or_neither_are_usage_errors(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["sim", "trace.csv", "--replay-cycle", str(tmp_path / "c.json")])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == "error: give a TRACE or --replay-cycle FILE, not both\n"
    with pytest.raises(SystemExit) as exit_:
        main(["sim"])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == ("error: missing TRACE (a trace file, or philly-week), "
                                       "or --replay-cycle FILE\n")
