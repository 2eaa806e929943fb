"""Elastic gangs in a cycle: the surplus a victim search may take first, and growth.

An elastic gang (a role with `replicas=(min, max)`) is admitted at its minimum, all or
nothing, like any gang. What it holds beyond that, its surplus, is borrowed: every search
for victims sees each surplus member as a small gang of its own (a *unit*, `of` its gang),
ahead of every whole gang, so reclaim and preempt shrink surplus before they stop anyone
whole; a gang with a ratio (core/ratio.py) has a unit per ratio step it holds instead, all
the step's bundles, so a search takes a whole step or none of it (KAI Scheduler's
semi-preemptible workloads; Volcano's minAvailable). A gang chosen whole takes its remaining
surplus with it. The surplus is preemptible even where the gang's class is not: only the
minimum is guaranteed.

Growth (`grow`, the cycle's last action by default) adds surplus members one at a time (a
ratio step all at once, or not at all) on settled free capacity, queue by queue in
fair-share order, within limits. A queue's gangs grow only once its line has no gang left
waiting that could fit on this cluster (unless `backfill`): growth never goes ahead of
pending work that comes first in its queue, and any pending gang of the same queue at the
same or a higher priority may take the surplus back (`shrink`). Other queues get it back
through reclaim and preempt, as borrowed capacity. Inside a queue, higher priority first,
then the gang running longest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from raygang.core.capacity import Capacity
from raygang.core.gang import PendingGang
from raygang.core.plan import Preemption
from raygang.core.ratio import step_of
from raygang.core.resources import Resources
from raygang.core.snapshot import GangKey, PlacedGang
from raygang.core.spec import Strategy

SEP = "/"  # a unit's id: "<gang id>/<member name>" (gang ids hold no "/")
AND = "+"  # a ratio step's unit: "<gang id>/<member>+<member>..." (names hold no "+")


def member_id(gang_id: str, member: str) -> str:
    return f"{gang_id}{SEP}{member}"


def member_of(unit_id: str) -> tuple[str, str]:
    """(gang id, member name) of a one-member unit's id."""
    gang_id, _, member = unit_id.partition(SEP)
    return gang_id, member


def members_of(unit_id: str) -> tuple[str, ...]:
    """The member names of a unit's id (a ratio step's: several)."""
    return tuple(unit_id.partition(SEP)[2].split(AND))


def per_member(ids: Iterable[str]) -> tuple[str, ...]:
    """These gang and unit ids, a ratio step's written as one id per member (what a plan
    names, and what the control plane waits for, is one member at a time), sorted."""
    out: set[str] = set()
    for one in ids:
        if AND in one:
            gang_id = one.partition(SEP)[0]
            out.update(member_id(gang_id, m) for m in members_of(one))
        else:
            out.add(one)
    return tuple(sorted(out))


def minimum_count(gang: PlacedGang) -> int:
    """How many of `gang.bundles` are its minimum's (all, for a rigid gang)."""
    e = gang.elastic
    return len(gang.bundles) if e is None else len(gang.bundles) - len(e.surplus) - len(e.leaving)


def split(gang: PlacedGang) -> tuple[PlacedGang, list[PlacedGang], list[PlacedGang]]:
    """(the gang holding its minimum only, a unit per surplus member, a unit per member
    being removed); a rigid gang is returned as it is."""
    e = gang.elastic
    if e is None or not (e.surplus or e.leaving):
        return gang, [], []
    n = minimum_count(gang)
    core = dataclasses.replace(gang, bundles=gang.bundles[:n])
    held = gang.bundles[n:]
    units = [_unit(gang, names, bundles)
             for names, bundles in _grouped(e.surplus, held, e.steps)]
    leaving = [_unit(gang, names, bundles, draining=True)
               for names, bundles in _grouped(e.leaving, held[len(e.surplus):], e.steps)]
    return core, units, leaving


def _grouped(names: Sequence[str], held: Sequence[tuple[str, Resources]],
             steps: Sequence[Sequence[str]]) -> list[tuple[list[str], list[tuple[str, Resources]]]]:
    """(members, their bundles) per unit: those of one ratio step together, in the order
    the step's first member comes; every other member alone."""
    if not steps:
        return [([name], [held[i]]) for i, name in enumerate(names)]
    step = step_of(steps)
    groups: dict[object, tuple[list[str], list[tuple[str, Resources]]]] = {}
    for i, name in enumerate(names):
        names_in, bundles = groups.setdefault(step.get(name, name), ([], []))
        names_in.append(name)
        bundles.append(held[i])
    return list(groups.values())


def _unit(gang: PlacedGang, names: Sequence[str], bundles: Sequence[tuple[str, Resources]],
          draining: bool = False) -> PlacedGang:
    return PlacedGang(
        gang_id=member_id(gang.gang_id, AND.join(names)), priority=gang.priority,
        bundles=tuple(bundles),
        queue=gang.queue, preemptible=True, running_since=gang.running_since,
        min_runtime_s=gang.min_runtime_s, draining=draining or gang.draining,
        checkpoint_s=gang.checkpoint_s, of=gang.gang_id)


def pieces(placed: Iterable[PlacedGang]) -> tuple[list[PlacedGang], list[PlacedGang]]:
    """(what victim searches and reclaim's protection read: every gang, elastic ones as
    their minimum plus a unit per surplus member; the units being removed)."""
    if not any(gang.elastic is not None for gang in placed):
        return list(placed), []  # the common case: nothing to split
    out: list[PlacedGang] = []
    leaving: list[PlacedGang] = []
    for gang in placed:
        core, units, gone = split(gang)
        out.append(core)
        out.extend(units)
        leaving.extend(gone)
    return out, leaving


def units_first(key: GangKey, lasting: bool = False) -> GangKey:
    """A victim order with every surplus unit ahead of every whole gang (and, among the
    units of one gang, the last grown first). `lasting`: `key` depends on the gang alone
    (not on the time), so each gang's key is kept with it (`PlacedGang.memo`): every
    cycle sorts every stoppable gang."""
    if not lasting:
        return lambda g: (g.of is None, *key(g))
    memo_key = ("units first", key)

    def kept(g: PlacedGang) -> tuple[Any, ...]:
        found = g.memo.get(memo_key)
        if found is None:
            found = g.memo[memo_key] = (g.of is None, *key(g))
        return found

    return kept


def with_remaining_units(victims: Sequence[PlacedGang], units_of: dict[str, list[PlacedGang]],
                         taken: set[str]) -> list[PlacedGang]:
    """The units of gangs chosen whole that were not chosen themselves nor `taken` before
    (a gang stopped whole loses its surplus too)."""
    if not units_of:
        return []
    chosen = {v.gang_id for v in victims}
    return [u for v in victims if v.of is None for u in units_of.get(v.gang_id, ())
            if u.gang_id not in chosen and u.gang_id not in taken]


def stops(victims: Sequence[PlacedGang], gang: PendingGang, action: str,
          why: Callable[[PlacedGang, PendingGang], str]) -> list[Preemption]:
    """The plan's stops for one search's victims: one per gang stopped whole, and one per
    elastic gang only shrunk, naming the surplus members it loses."""
    out = [Preemption(v.gang_id, gang.gang_id, action, why(v, gang))
           for v in victims if v.of is None]
    whole = {v.gang_id for v in victims if v.of is None}
    shrunk: dict[str, list[PlacedGang]] = {}
    for unit in victims:
        if unit.of is not None and unit.of not in whole:
            shrunk.setdefault(unit.of, []).append(unit)
    for owner, units in shrunk.items():
        members = tuple(sorted(m for u in units for m in members_of(u.gang_id)))
        out.append(Preemption(owner, gang.gang_id, action, f"shrunk by {len(members)} surplus "
                              f"member(s): {why(units[0], gang)}", members=members))
    return out


def place_member(gang: PlacedGang, bundle: Resources, capacity: Capacity,
                 settled: Callable[[str], Resources], member: str | None = None) -> str | None:
    """A node for one more member of `gang` (named `member`) under its strategy, on settled
    free capacity: STRICT_PACK on its node; STRICT_SPREAD on a node it does not use; PACK
    its own nodes first, SPREAD other nodes first; best fit (tightest, then lowest id)
    among them; only the nodes it may grow on where it has them (`Elastic.nodes_for`)."""
    assert gang.elastic is not None
    strategy, within = gang.elastic.strategy, gang.elastic.nodes_for(member)
    used = {node for node, _ in gang.bundles}
    if strategy is Strategy.STRICT_PACK:
        tiers: list[tuple[Iterable[str] | None, frozenset[str]]] = [(sorted(used), frozenset())]
    elif strategy is Strategy.STRICT_SPREAD:
        tiers = [(None, frozenset(used))]
    elif strategy is Strategy.PACK:
        tiers = [(sorted(used), frozenset()), (None, frozenset(used))]
    else:
        tiers = [(None, frozenset(used)), (sorted(used), frozenset())]
    for among, exclude in tiers:
        if within is not None:  # every tier, narrowed to the nodes it may grow on
            among = [n for n in (sorted(within) if among is None else among)
                     if n in within and n in capacity]
        excluded = set(exclude)
        while (node := capacity.best_node(bundle, exclude=excluded, among=among)) is not None:
            if bundle.fits_in(settled(node)):
                return node
            excluded.add(node)  # what frees there is promised to a preemptor
    return None


def rebooked(booked: dict[str, str], actual: Sequence[str]) -> dict[str, str]:
    """The members whose booking must move, and where, for `booked` (member -> node) to
    hold the nodes in `actual` (one per member, in any order): where a library places
    interchangeable members itself (Serve's replicas), raygang's books follow it. A member
    keeps its node while `actual` has one there; the rest take the nodes left, in order."""
    left: dict[str, int] = {}
    for node in actual:
        left[node] = left.get(node, 0) + 1
    moving = []
    for member, node in booked.items():
        if left.get(node, 0) > 0:
            left[node] -= 1
        else:
            moving.append(member)
    free = [node for node in sorted(left) for _ in range(left[node])]
    return dict(zip(moving, free))
