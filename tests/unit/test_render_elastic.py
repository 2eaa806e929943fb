"""How `raygang status` and `raygang explain` show an elastic gang (no server: the
renderers take the status JSON the API returns)."""

from __future__ import annotations

import re

from rich.console import Console

from raygang.cli import render

ELASTIC = {
    "gang_id": "dp-1", "name": "dp", "kind": "gang", "queue": "team-a", "priority": 100,
    "state": "RUNNING", "reason": None, "queue_position": None, "world_size": 3,
    "min_size": 2, "max_size": 4, "grow_reason": "no free GPU on any node (needs {GPU: 1})",
    "restarts": 0, "preemptions": 0, "submitted_at": 1.0, "started_at": 2.0,
    "finished_at": None, "events": [], "members": [],
}


def _text(renderable) -> str:
    console = Console(width=200, record=True)
    console.print(renderable)
    return console.export_text()


def test_status_shows_the_world_size_its_range_and_why_it_grows_no_further():
    out = _text(render.gang_details(ELASTIC))
    assert re.search(r"world size +3 \(elastic: 2 to 4\)", out), out
    assert re.search(r"grows +no free GPU on any node \(needs \{GPU: 1\}\)", out), out
    rigid = {**ELASTIC, "world_size": 2, "min_size": None, "max_size": None,
             "grow_reason": None}
    out = _text(render.gang_details(rigid))
    assert re.search(r"world size +2 *\n", out), out
    assert "elastic" not in out and "grows" not in out


def test_explain_says_what_an_elastic_gang_runs_and_why_it_grows_no_further():
    out = _text(render.explain(ELASTIC, None))
    assert ("elastic: runs 3 of 2 to 4 members; grows: no free GPU on any node "
            "(needs {GPU: 1})") in out
    assert "elastic" not in _text(render.explain({**ELASTIC, "max_size": None}, None))


def test_list_shows_a_size_column_where_a_gang_is_elastic():
    rigid = {**ELASTIC, "gang_id": "rigid-1", "world_size": 4, "min_size": None,
             "max_size": None}
    out = _text(render.gangs_table({"now": 10.0, "total": 2, "items": [ELASTIC, rigid]}))
    header = next(line for line in out.splitlines() if line.startswith("ID"))
    assert header.split() == ["ID", "QUEUE", "PRIORITY", "STATE", "SIZE", "POSITION", "AGE",
                              "REASON"]
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if line.startswith(("dp-1", "rigid-1"))}
    assert rows["dp-1"][4:6] == ["3", "(2-4)"] and rows["rigid-1"][4] == "4", rows
    # Rigid gangs alone: the columns of `raygang list` (docs/interfaces.md), no SIZE.
    out = _text(render.gangs_table({"now": 10.0, "total": 1, "items": [rigid]}))
    assert "SIZE" not in out


RATIO = {**ELASTIC, "world_size": 5, "min_size": 2, "max_size": 8, "roles": [
    {"role": "prefill", "size": 3, "min_size": 1, "max_size": 5, "step": 2,
     "grow_reason": "no room for a whole ratio step of 3 members"},
    {"role": "decode", "size": 2, "min_size": 1, "max_size": 3, "step": 1,
     "grow_reason": None}]}


def test_status_and_explain_show_each_role_its_size_step_and_why_not_larger():
    out = _text(render.gang_details(RATIO))
    assert re.search(r"ROLE +SIZE +STEP +WHY NOT LARGER", out), out
    assert re.search(r"prefill +3 \(1-5\) +2 +no room for a whole ratio step of 3 members",
                     out), out
    assert re.search(r"decode +2 \(1-3\) +1 +-", out), out
    assert "WHY NOT LARGER" not in _text(render.gang_details(ELASTIC))  # no roles given
    out = _text(render.explain(RATIO, None))
    assert ("role prefill: 3 (1-5), by 2 at a time; no room for a whole ratio step of 3 "
            "members") in out
