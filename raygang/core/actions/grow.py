"""grow: running elastic gangs add surplus members on free capacity, one at a time.

Once the pending gangs were offered, the queues take turns in fair-share order (the one
furthest below its share next); in a queue the gang of highest priority, then the one
running longest, adds its next member (`core.elastic.place_member`), or its next ratio
step: every member of the step placed, or none of them (core/ratio.py). A queue's gangs grow
only if its line has no gang left waiting that could fit on this cluster (unless
`backfill`), within its limits, on settled capacity (not what this cycle's victims free),
and not while a gang is being shrunk or is not running yet. Every gang left below its
maximum gets a reason (`Plan.grow_waits`)."""

from __future__ import annotations

import dataclasses
import math

from raygang.core.actions.action import Action, GrowingCycle
from raygang.core.elastic import place_member
from raygang.core.plan import Growth
from raygang.core.ratio import GROWS_NO_FURTHER
from raygang.core.resources import Resources
from raygang.core.snapshot import Elastic, PlacedGang


def grow(cycle: GrowingCycle) -> None:
    shrunk = {p.victim for p in cycle.preemptions}
    by_queue: dict[str, list[PlacedGang]] = {}
    for gang in cycle.snapshot.placed:
        e = gang.elastic
        if e is None or not e.missing:
            continue
        if gang.draining or gang.gang_id in shrunk or e.leaving:
            cycle.grow_waits[gang.gang_id] = _runs(gang, "it is being shrunk or stopped")
        elif gang.running_since is None:
            cycle.grow_waits[gang.gang_id] = _runs(gang, "it grows once it runs")
        elif gang.queue not in cycle.tree.specs:
            cycle.grow_waits[gang.gang_id] = _runs(gang, f"queue {gang.queue!r} is not "
                                                         "configured")
        else:
            by_queue.setdefault(gang.queue, []).append(gang)
    ready = {}
    for queue, gangs in by_queue.items():
        first = _first_waiting(cycle, queue)
        if first is not None:
            for gang in gangs:
                cycle.grow_waits[gang.gang_id] = _runs(
                    gang, f"pending gangs of queue {queue!r} come first (gang {first} waits; "
                          "its line is bounded, backfill_lookahead)")
            continue
        ready[queue] = sorted(gangs, key=lambda g: (
            -g.priority, g.running_since if g.running_since is not None else math.inf,
            g.gang_id))
    order = cycle.queue_order(list(ready))
    grown: dict[str, list[tuple[str, str]]] = {}  # gang id -> (member, node) added
    while (turn := order.pick()) is not None:
        gangs = ready[turn]
        added = False
        while gangs and not added:
            gang = gangs[0]
            problem = _next_unit(cycle, gang, grown.setdefault(gang.gang_id, []))
            if problem is None:
                added = True  # it took one: the queues take turns
                if len(grown[gang.gang_id]) == len(_elastic(gang).missing):
                    gangs.pop(0)
            else:
                cycle.grow_waits[gang.gang_id] = _runs(gang, problem,
                                                       len(grown[gang.gang_id]))
                gangs.pop(0)
        if added:
            order.touched(turn)
        if not gangs:
            order.done(turn)
    for gang_id, members in grown.items():
        if members:
            cycle.growths.append(Growth(gang_id, tuple(m for m, _ in members),
                                        tuple(n for _, n in members)))


def _first_waiting(cycle: GrowingCycle, queue: str) -> str | None:
    if cycle.lookahead(queue) is None:  # a best-effort line: growth waits for no gang
        return None
    for gang in cycle.left.get(queue, ()):
        if gang.gang_id not in cycle.admitted and cycle.ever.fits(gang):
            return gang.gang_id
    return None


def _next_unit(cycle: GrowingCycle, gang: PlacedGang, grown: list[tuple[str, str]]
               ) -> str | None:
    """Add the gang's next member, or all the members its next ratio step misses, on the
    cycle's capacity; None if it did, else why not (and nothing of the step is added)."""
    e = _elastic(gang)
    unit = _unit(e, len(grown))
    demand = Resources.sum([bundle for _, bundle in unit])
    problem = cycle.book.limit_problem(gang.queue, demand)
    if problem:
        return problem
    mark = cycle.statement.checkpoint()
    placed: list[tuple[str, str]] = []
    for name, bundle in unit:
        now = dataclasses.replace(gang, bundles=gang.bundles + tuple(
            (node, b) for (_, node), (_, b) in zip(grown + placed, e.missing)))
        node = place_member(now, bundle, cycle.capacity, cycle.draining.settled, name)
        if node is None:
            cycle.statement.rollback(mark)  # a step grows whole or not at all
            where = "node of its own (it grows on no other)" if e.nodes_for(name) else "node"
            short = (f"no {where} has {_fmt(bundle)} free for member {name} "
                     f"({e.strategy.value})")
            if len(unit) == 1:
                return short
            return (f"no room for a whole ratio step of {len(unit)} members "
                    f"({', '.join(n for n, _ in unit)}, {_fmt(demand)} in all): {short}")
        cycle.statement.grow(gang.queue, node, bundle)
        placed.append((name, node))
    cycle.statement.commit(mark)
    grown.extend(placed)
    return None


def _unit(e: Elastic, start: int) -> list[tuple[str, Resources]]:
    """What grows next, from `e.missing[start]` on: that member alone, or it and the
    members after it of its ratio step (`missing` keeps a step's members together)."""
    first = e.missing[start]
    step = next((set(s) for s in e.steps if first[0] in s), None)
    if step is None:
        return [first]
    unit = [first]
    for name, bundle in e.missing[start + 1:]:
        if name not in step:
            break
        unit.append((name, bundle))
    return unit


def _elastic(gang: PlacedGang) -> Elastic:
    assert gang.elastic is not None  # grow only ever looks at elastic gangs
    return gang.elastic


def _runs(gang: PlacedGang, why: str, grown: int = 0) -> str:
    e = _elastic(gang)
    have = len(gang.bundles) - len(e.leaving) + grown
    most = len(gang.bundles) - len(e.leaving) + len(e.missing)
    return f"runs {have} of at most {most} members; {GROWS_NO_FURTHER}{why}"


def _fmt(bundle: Resources) -> str:
    return ", ".join(f"{k} {v:g}" for k, v in bundle.items())


ACTION = Action("grow", None, finish=grow)
