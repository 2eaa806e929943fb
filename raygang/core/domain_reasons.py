"""Why a gang does not fit, in words with numbers, its topology included: explain.py's
`why_not` for a gang without one; for one with a layout, which rule no domain can meet
now, and how close each domain comes.

The rules are looked at one by one, outermost first, each as if it were the only one: the
first that fails alone is named (the resources themselves, if the gang would not fit even
without its topology). When each would fit alone but not all together, that is said.
"""

from __future__ import annotations

from collections.abc import Sequence

from raygang.core.capacity import Capacity
from raygang.core.domains import DomainPlacer
from raygang.core.explain import describe_bundles, why_not
from raygang.core.placement import place
from raygang.core.resources import Resources, format_amount
from raygang.core.spec import Strategy
from raygang.core.topology import Layout, Topology

_LISTED = 4  # domains named in a reason


def why_not_placed(bundles: Sequence[Resources], strategy: Strategy, capacity: Capacity,
                   layout: Layout | None) -> str:
    """Why `bundles` cannot be placed under `strategy` within the domains `layout` asks
    for (None: anywhere) on `capacity` right now."""
    if layout is None or place(bundles, strategy, capacity) is None:  # not even without it
        return why_not(bundles, strategy, capacity)
    shape = f"{strategy.value}, {describe_bundles(bundles)}"
    absent = [k for k in layout.levels if not capacity.domains(k)]
    if absent:
        return (f"asks for domains of label {absent[0]!r} (topology), but no alive node has "
                f"that label ({shape})")
    if strategy is Strategy.STRICT_PACK:
        levels = ", ".join(repr(k) for k in layout.levels)
        return (f"needs {Resources.sum(bundles)} on one node carrying label(s) {levels} "
                f"(topology; {shape}); no such node has it free")
    reasons = _Reasons(bundles, strategy, capacity, shape)
    everything = list(range(len(bundles)))
    rules: list[tuple[str, list[int], Topology]] = (
        [("", everything, layout.gang)] if layout.gang else [])
    rules += [(f"role {s.role!r}: ", list(range(s.start, s.stop)), s.rule) for s in layout.roles]
    for what, indices, rule in rules:
        problem = reasons.required(rule, indices) or reasons.segments(rule, indices)
        if problem:
            return what + problem
    described = "; ".join(what + rule.describe() for what, _, rule in rules)
    return (f"no placement keeps every topology rule at once ({described}; {shape}), though "
            f"each alone would fit now")


class _Reasons:
    def __init__(self, bundles: Sequence[Resources], strategy: Strategy, capacity: Capacity,
                 shape: str):
        self.bundles, self.strategy, self.capacity, self.shape = bundles, strategy, capacity, shape

    def _placer(self) -> DomainPlacer:
        return DomainPlacer(self.bundles, self.strategy, self.capacity, place)

    def required(self, rule: Topology, indices: list[int]) -> str | None:
        """Why no domain of the required level holds `indices` (None: one does)."""
        level = rule.required
        if level is None:
            return None
        placer = self._placer()
        try:
            if placer.rule(Topology(required=level), indices, self.capacity.node_ids):
                return None
        finally:
            placer.rollback(0)
        need = placer.demand(indices)
        res = need.names_by_scarcity()[0]
        domains = self.capacity.domains(level)
        free = {v: placer.free_in(ids) for v, ids in domains.items()}
        most = sorted(domains, key=lambda v: (-free[v].units(res), v))
        listed = ", ".join(f"{v}: {format_amount(res, free[v].get(res))} on {len(domains[v])} "
                           f"node{'s' if len(domains[v]) != 1 else ''}" for v in most[:_LISTED])
        more = f" and {len(most) - _LISTED} more" if len(most) > _LISTED else ""
        fragmented = ""
        if need.fits_in(free[most[0]]):
            fragmented = (f"; {level} {most[0]} has enough free in all, but not on nodes that "
                          f"hold the bundles")
        return (f"needs {need} within one domain of {level!r} (topology required {level!r}; "
                f"{self.shape}); no single {level} has room now: free {res} by {level} "
                f"{listed}{more}{fragmented}")

    def segments(self, rule: Topology, indices: list[int]) -> str | None:
        """Why the segments of `indices` do not all find a domain (None: they do)."""
        if rule.segment is None or rule.segment_level is None:
            return None
        size, level = rule.segment, rule.segment_level
        placer = self._placer()
        try:
            if placer.segments(rule, indices, self.capacity.node_ids, None):
                return None
        finally:
            placer.rollback(0)
        chunks = [indices[i:i + size] for i in range(0, len(indices), size)]
        room: dict[str, int] = {}
        for value, ids in self.capacity.domains(level).items():
            room[value] = self._how_many(chunks[0], ids)
        having = sorted((v for v in room if room[v]), key=lambda v: (-room[v], v))
        listed = ", ".join(f"{v}: {room[v]}" for v in having[:_LISTED])
        more = f" and {len(having) - _LISTED} more" if len(having) > _LISTED else ""
        where = f" ({listed}{more})" if having else ""
        each = Resources.sum(self.bundles[i] for i in chunks[0])
        return (f"needs {len(chunks)} segments of {size} members ({each} each), each within "
                f"one domain of {level!r} (topology segment {size} at {level!r}; "
                f"{self.shape}); the {level}s have room for {sum(room.values())} now{where}")

    def _how_many(self, chunk: list[int], nodes: list[str]) -> int:
        """How many copies of the segment `chunk` fit on `nodes` together, up to the
        bundles' count (enough to say what is short)."""
        placer = self._placer()
        try:
            count = 0
            while count < len(self.bundles) and placer.fill(chunk, nodes):
                count += 1
            return count
        finally:
            placer.rollback(0)
