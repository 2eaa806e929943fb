"""A `Plan` as plain data (JSON-able dicts and lists), and the first place two differ.

A cycle keeps the reasons and places in line of the gangs behind a blocked queue head
unread (`plan.Waitings`, `plan.Positions`): reading them costs what waits. Turning a plan
into data reads them all, so it is done on request (a dumped cycle), never per cycle.
Two plans are the same when their data are equal; `at` is left out, as it is only the
cycle's clock (a dumped cycle records it as its `now`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from raygang.core.plan import Plan, Positions, Waiting, Waitings


def plan_data(plan: Plan) -> dict[str, Any]:
    """Admissions, preemptions and growths in the plan's order; why each gang left
    pending waits and its place in line, by gang id; why elastic gangs grow no further."""
    return {
        "admissions": [
            {"gang_id": a.gang_id, "nodes": list(a.nodes), "action": a.action,
             "victims": list(a.victims), "waits_for": list(a.waits_for)}
            for a in plan.admissions],
        "preemptions": [
            {"victim": p.victim, "preemptor": p.preemptor, "action": p.action,
             "reason": p.reason, "members": list(p.members)}
            for p in plan.preemptions],
        "growths": [
            {"gang_id": g.gang_id, "members": list(g.members), "nodes": list(g.nodes)}
            for g in plan.growths],
        "grow_waits": dict(plan.grow_waits),
        "waiting": {gang_id: _waiting(w) for gang_id, w in _waitings(plan.waiting).items()},
        "positions": _positions(plan.positions),
    }


def _waitings(waiting: Mapping[str, Waiting]) -> dict[str, Waiting]:
    return waiting.materialized() if isinstance(waiting, Waitings) else dict(waiting)


def _positions(positions: Mapping[str, int]) -> dict[str, int]:
    return positions.materialized() if isinstance(positions, Positions) else dict(positions)


def _waiting(waiting: Waiting) -> dict[str, Any]:
    return {"code": waiting.code.value, "message": waiting.message, "behind": waiting.behind}


_BY_GANG = ("waiting", "positions", "grow_waits")  # keyed by gang id: shown as ['id']


def first_difference(recorded: Any, replayed: Any, path: str = "plan") -> str | None:
    """Where two plans' data first differ (`plan.waiting['g-2'].message: recorded '...',
    replayed '...'`), or None if they are the same."""
    if isinstance(recorded, dict) and isinstance(replayed, dict):
        by_gang = path.rsplit(".", 1)[-1] in _BY_GANG
        for key in [*recorded, *(k for k in replayed if k not in recorded)]:
            where = f"{path}[{key!r}]" if by_gang else f"{path}.{key}"
            if key not in replayed:
                return f"{where}: recorded {_short(recorded[key])}, not in the replayed plan"
            if key not in recorded:
                return f"{where}: not recorded, replayed {_short(replayed[key])}"
            found = first_difference(recorded[key], replayed[key], where)
            if found is not None:
                return found
        return None
    if isinstance(recorded, list) and isinstance(replayed, list):
        for i, (a, b) in enumerate(zip(recorded, replayed)):
            found = first_difference(a, b, f"{path}[{i}]")
            if found is not None:
                return found
        if len(recorded) != len(replayed):
            extra = max(recorded, replayed, key=len)[min(len(recorded), len(replayed))]
            return (f"{path}: recorded {len(recorded)} items, replayed {len(replayed)} "
                    f"(the first extra: {_short(extra)})")
        return None
    if recorded != replayed:
        return f"{path}: recorded {_short(recorded)}, replayed {_short(replayed)}"
    return None


def _short(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."
