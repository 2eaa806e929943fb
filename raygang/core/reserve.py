"""Holding capacity for a gang that has waited too long (`PolicyConfig.sla_waiting_time_s`).

A large gang starves where small ones keep taking every GPU that frees: it needs whole
nodes at once, and reclaim cannot help a gang larger than its queue's quota. Volcano's
`sla` plugin answers with `sla-waiting-time` (docs/design/sla-plugin.md): once a job has
waited that long, the scheduler locks the idle resources it would use, even before they
are enough, so that they add up instead of being handed to others. The same here, pure and
per cycle: the gang that has been pending longest past the limit, at the head of its
queue's line and within its queue's limits, is *elected*; each cycle the nodes closest to
holding it (the least missing, scarcest resource first) are chosen again, and what is free
on them, up to what the gang asks there, is held: no other gang is placed on it. One gang
at a time, as Volcano's `elect` did; the next is elected once it runs. With
`sla_max_holds` above 1 the next longest pending heads of other queues are elected too,
each held on the nodes closest to holding it of what the holds before it left free.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from raygang.core.capacity import Capacity, Undo
from raygang.core.gang import PendingGang
from raygang.core.placement import largest_first
from raygang.core.preemption.trade import scarcest
from raygang.core.resources import Resources, format_amount
from raygang.core.snapshot import NodeState
from raygang.core.spec import Strategy


def elect(heads: Iterable[PendingGang], now: float, sla_s: float,
          admissible: Callable[[PendingGang], bool]) -> Iterator[PendingGang]:
    """The queue heads pending beyond `sla_s` that their queues' limits would admit, longest
    pending first (total order: longest pending, then submission, then id)."""
    late = [g for g in heads if g.pending_since is not None and now - g.pending_since >= sla_s]
    return (g for g in sorted(late, key=lambda g: (g.pending_since, g.seq, g.gang_id))
            if admissible(g))


def wide_gangs(min_nodes: int, nodes: Sequence[NodeState]
               ) -> Callable[[Resources], bool] | None:
    """Whether a gang's total needs at least `min_nodes` of `nodes` at once: more of its
    scarcest resource than `min_nodes` - 1 of the largest hold (`sla_min_nodes`); None:
    every gang may be held for (`min_nodes` 1)."""
    if min_nodes <= 1:
        return None
    most: dict[str, float] = {}  # resource -> the largest node's (read once per resource)

    def wide(total: Resources) -> bool:
        res = scarcest(total)
        if res is None:
            return False
        if res not in most:
            most[res] = max((n.total.get(res) for n in nodes), default=0.0)
        return total.get(res) > (min_nodes - 1) * most[res]

    return wide


def closest_nodes(gang: PendingGang, capacity: Capacity) -> list[tuple[str, Resources]] | None:
    """(node, bundle) for each bundle on the nodes that miss the least of it now (their
    totals must hold it; STRICT_PACK on one node, STRICT_SPREAD on distinct ones), or None
    if the nodes' totals cannot hold the gang. A gang that requires one domain of a level
    (core/topology.py) is held inside the domain that misses the least of it."""
    rule = gang.layout.gang if gang.layout is not None else None
    if rule is None or rule.required is None:
        return _closest_nodes(gang, capacity)
    best: tuple[tuple[int, ...], str, list[tuple[str, Resources]]] | None = None
    for value, ids in capacity.domains(rule.required).items():
        found = _closest_nodes(gang, capacity.subset(ids))
        if found is None:
            continue
        names = capacity.resource_names
        missing = [sum(x) for x in zip(*(_missing(b, capacity.free(n), names) for n, b in found))]
        if best is None or (tuple(missing), value) < best[:2]:
            best = (tuple(missing), value, found)
    return None if best is None else best[2]


def _closest_nodes(gang: PendingGang, capacity: Capacity) -> list[tuple[str, Resources]] | None:
    names = capacity.resource_names
    if gang.strategy is Strategy.STRICT_PACK:
        total = gang.total
        node = _closest(total, capacity, set(), {}, names)
        return None if node is None else [(node, b) for b in gang.bundles]
    spread = gang.strategy is Strategy.STRICT_SPREAD
    assigned: dict[str, Resources] = {}
    out: list[tuple[str, Resources] | None] = [None] * len(gang.bundles)
    for i in largest_first(gang.bundles, capacity):
        bundle = gang.bundles[i]
        node = _closest(bundle, capacity, set(assigned) if spread else set(), assigned, names)
        if node is None:
            return None
        assigned[node] = assigned.get(node, Resources()) + bundle
        out[i] = (node, bundle)
    return [pair for pair in out if pair is not None]


def _closest(demand: Resources, capacity: Capacity, exclude: set[str],
             assigned: dict[str, Resources], names: tuple[str, ...]) -> str | None:
    """The node missing the least of `demand` now (then the lowest id) whose total holds
    it with what it was assigned already. Nodes are read by class of identical free
    vectors (a few hundred at most), not one by one."""
    best: tuple[tuple[int, ...], str] | None = None
    for node, mine in assigned.items():  # their free is less what they were assigned
        if node not in exclude and (mine + demand).fits_in(capacity.total(node)):
            key = (_missing(demand, capacity.free(node) - mine, names), node)
            best = key if best is None or key < best else best
    for free, ids in capacity.classes():
        missing = _missing(demand, free, names)
        if best is not None and missing > best[0]:
            continue
        for node in ids:  # sorted: the first that qualifies is the class's lowest id
            if node in exclude or node in assigned or not demand.fits_in(capacity.total(node)):
                continue
            if best is None or (missing, node) < best:
                best = (missing, node)
            break
    return None if best is None else best[1]


def _missing(demand: Resources, free: Resources, names: tuple[str, ...]) -> tuple[int, ...]:
    return tuple(max(0, demand.units(n) - max(0, free.units(n))) for n in names)


@dataclass
class Hold:
    """The free capacity held for the elected gang during one cycle."""

    gang: PendingGang
    nodes: list[tuple[str, Resources]]  # what the gang would take, per bundle
    held: list[tuple[str, Resources]]  # what is free there now, up to that: held
    capacity: Capacity
    _undo: Undo | None = None

    @classmethod
    def of(cls, gang: PendingGang, capacity: Capacity,
           settled: Callable[[str], Resources] | None = None) -> Hold | None:
        """The hold for `gang`; `settled`: what is free on a node apart from what gangs
        being stopped free there (that capacity is not held: who takes it waits for them)."""
        nodes = closest_nodes(gang, capacity)
        if nodes is None:
            return None
        held: list[tuple[str, Resources]] = []
        left: dict[str, Resources] = {}
        for node, bundle in nodes:
            free = left.get(node, (settled or capacity.free)(node))
            part = Resources({n: max(0.0, min(bundle[n], free.get(n))) for n in bundle})
            left[node] = free - part
            held.append((node, part))
        hold = cls(gang, nodes, held, capacity)
        hold.apply()
        return hold

    @property
    def holds_any(self) -> bool:
        return any(part for _, part in self.held)

    def apply(self) -> None:
        if self._undo is None:
            self._undo = self.capacity.reserve(self.held)

    def release(self) -> None:
        if self._undo is not None:
            self._undo()
            self._undo = None

    def note(self, gang: PendingGang, now: float, sla_s: float) -> str:
        """What a waiting gang's reason says of the hold: the elected gang, why it is ahead
        of others on these nodes, with numbers; any other, whose nodes are held."""
        if gang is self.gang:
            return self.describe(now, sla_s)
        names = ", ".join(dict.fromkeys(self.capacity.display(n) for n, _ in self.nodes))
        return (f"what frees on {names} is held for gang {self.gang.gang_id}, pending "
                f"beyond sla_waiting_time_s {sla_s:g} s")

    def describe(self, now: float, sla_s: float) -> str:
        """Why this gang is ahead of others on these nodes, with numbers."""
        names = sorted({n for n, _ in self.nodes}, key=[n for n, _ in self.nodes].index)
        shown = ", ".join(self.capacity.display(n) for n in names)
        res = self.gang.total.names_by_scarcity()[0]
        held = sum(part.get(res) for _, part in self.held)
        since = self.gang.pending_since
        waited = (now - (now if since is None else since)) / 3600
        return (f"pending {waited:.1f} h, beyond sla_waiting_time_s {sla_s:g} s: what frees on "
                f"node{'s' if len(names) > 1 else ''} {shown} is held for it "
                f"({format_amount(res, held)} of the {format_amount(res, self.gang.total[res])} "
                f"{res} it needs there is free now)")
