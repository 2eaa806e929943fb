"""`raygang sim --replay-cycle FILE`: decide a dumped production cycle again, offline.

The file is what `GET /v1/debug/cycle` (or `raygang.debug_cycle()`) returned: one cycle's
inputs and the plan the scheduler made of them (`core.cycle_dump`). The cycle is rerun
with `core.schedule`, its plan printed (admissions with their nodes and victims,
preemptions with their reasons, why each gang left pending waits), and compared with the
recorded plan: the same, or where they first differ.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from pathlib import Path
from typing import Any

from raygang.core.config import PolicyConfig
from raygang.core.cycle_dump import CycleDump, load_cycle
from raygang.core.plan_data import plan_data

Echo = Callable[[str], None]
SAME, DIFFERENT = 0, 1  # exit codes


def read_dump(path: Path) -> CycleDump:
    """The dump in `path`; OSError or CycleDumpError (one line, naming the field)."""
    return load_cycle(path.read_bytes())


def replay(dump: CycleDump, echo: Echo) -> int:
    """Rerun the cycle, print its plan and how it compares; SAME or DIFFERENT."""
    echo(_heading(dump))
    if dump.error is not None:
        return _replay_failed(dump, echo)
    try:
        data = plan_data(dump.replay())
    except Exception as error:  # noqa: BLE001 - reported: the point of a replay
        echo(f"the replayed cycle fails: {type(error).__name__}: {error}")
        return DIFFERENT
    for line in render_plan(data, dump):
        echo(line)
    echo("")
    if dump.plan is None:
        echo("no plan recorded in the dump to compare with")
        return SAME
    difference = dump.difference(data)
    if difference is None:
        echo("same plan as the scheduler made")
        return SAME
    echo(f"differs from the plan the scheduler made: {difference}")
    return DIFFERENT


def _replay_failed(dump: CycleDump, echo: Echo) -> int:
    echo(f"the recorded cycle failed: {dump.error}")
    try:
        dump.replay()
    except Exception as error:  # noqa: BLE001 - the failure is what is replayed
        again = f"{type(error).__name__}: {error}"
        echo(f"the replayed cycle fails {'the same way' if again == dump.error else 'too'}: "
             f"{again}")
        return SAME if again == dump.error else DIFFERENT
    echo("the replayed cycle does not fail")
    return DIFFERENT


def _heading(dump: CycleDump) -> str:
    when = datetime.datetime.fromtimestamp(dump.now, datetime.timezone.utc)
    nodes = dump.snapshot.nodes
    alive = sum(n.alive for n in nodes)
    pending = sum(len(line) for line in dump.backlog.values())
    actions = ", ".join(dump.config.actions)
    return (f"cycle at {when:%Y-%m-%d %H:%M:%S} UTC (now={dump.now:.3f}): "
            f"{_count(len(nodes), 'node')} ({alive} alive), "
            f"{_count(len(dump.snapshot.placed), 'gang')} holding capacity, "
            f"{_count(pending, 'gang')} pending in {_count(len(dump.backlog), 'queue')}; "
            f"actions {actions}, backfill {_backfill(dump.config)}")


def _backfill(config: PolicyConfig) -> str:
    """The policy's line, then the queues' own (`Cycle.lookahead`: a queue's own wins)."""
    policy = _line(None if config.backfill else config.backfill_lookahead)
    own = [f"{q.name}: {_line(q.backfill_lookahead)}" for q in config.queues
           if q.backfill_lookahead is not None]
    return f"{policy} per queue" + (f" (own lines: {'; '.join(own)})" if own else "")


def _line(n: int | None) -> str:
    return "on" if n is None else "off" if n == 0 else \
        f"up to {n} gang{'s' if n > 1 else ''} set aside"


def render_plan(data: dict[str, Any], dump: CycleDump) -> list[str]:
    """The plan's data (`core.plan_data`) as lines to read."""
    names = {n.node_id: n.name or n.node_id[:8] for n in dump.snapshot.nodes}
    gangs = {g.gang_id: g for line in dump.backlog.values() for g in line}
    out = [f"admitted ({len(data['admissions'])}):"]
    for a in data["admissions"]:
        victims = f"; stopping {', '.join(a['victims'])}" if a["victims"] else ""
        others = [g for g in a["waits_for"] if g not in a["victims"]]
        after = f"; once {', '.join(others)} have left" if others else ""
        out.append(f"  {_gang(a['gang_id'], gangs)} by {a['action']} on "
                   f"{_nodes(a['nodes'], names)}{victims}{after}")
    out.append(f"preempted ({len(data['preemptions'])}):")
    for p in data["preemptions"]:
        members = f" (members {', '.join(p['members'])})" if p["members"] else ""
        out.append(f"  {p['victim']}{members} for {p['preemptor']} by {p['action']}: "
                   f"{p['reason']}")
    if data["growths"] or data["grow_waits"]:
        out.append(f"grown ({len(data['growths'])}):")
        out += [f"  {g['gang_id']} + {', '.join(g['members'])} on {_nodes(g['nodes'], names)}"
                for g in data["growths"]]
        out += [f"  {gang_id} grows no further: {why}"
                for gang_id, why in data["grow_waits"].items()]
    waiting, positions = data["waiting"], data["positions"]
    out.append(f"waiting ({len(waiting)}):")
    in_line = [g for g in gangs if g in waiting] + [g for g in waiting if g not in gangs]
    for gang_id in in_line:
        w = waiting[gang_id]
        queue = gangs[gang_id].spec.queue if gang_id in gangs else "?"
        place = f" #{positions[gang_id]}" if gang_id in positions else ""
        out.append(f"  {queue}{place} {_gang(gang_id, gangs)} {w['code']}: {w['message']}")
    return out


def _gang(gang_id: str, gangs: dict) -> str:
    gang = gangs.get(gang_id)
    return gang_id if gang is None or gang.spec.name in gang_id else \
        f"{gang_id} ({gang.spec.name})"


def _nodes(nodes: list[str], names: dict[str, str]) -> str:
    """`w-1 x2, w-2`: each node once, with how many bundles go there."""
    counts: dict[str, int] = {}
    for node in nodes:
        counts[node] = counts.get(node, 0) + 1
    return ", ".join(names.get(n, n) + (f" x{c}" if c > 1 else "") for n, c in counts.items())


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'' if n == 1 else 's'}"
