"""Placement for a gang that asks for a topology (core/topology.py), by domains of labels.

Each rule narrows where the plain placement (placement.py, the gang's strategy) runs:

- `required`: the domains of that level that could hold the gang are tried in turn, the
  one with the least free first (bin packing, as KAI chooses a domain: the roomy ones are
  left for larger gangs); the first where the rest of the rules can be met wins;
- `preferred`: inside that, first each domain of the preferred level alone (least free
  first); if none has room, the members in rank order fill the roomiest domains first,
  each taking the longest run of consecutive ranks it can hold, so that the gang spans as
  few domains as it can (KAI orders a domain's sub-domains by free the same way); and
  where that finds no way, as if no level were preferred: it never makes a gang wait;
- `segment`: members of consecutive ranks, `segment` at a time, each group inside one
  domain of `segment_level`: the domain of the group before it if it has room, else the
  roomiest (a preferred level's domains already used first);
- a role with a rule of its own is placed by it inside the gang's domain, before the
  roles without one.

Greedy, like the plain placement and like Ray's own: no search over every way of
cutting the gang. Deterministic (ties go to the lowest label value, then node id), and
`capacity` is left as it was found. A STRICT_SPREAD gang never shares a node across the
parts placed apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial

from raygang.core.capacity import Capacity, Undo
from raygang.core.resources import Resources
from raygang.core.spec import Strategy
from raygang.core.topology import Layout, Span, Topology

Assignment = tuple[str, ...]
Plain = Callable[[Sequence[Resources], Strategy, Capacity], "Assignment | None"]


def place_in_domains(bundles: Sequence[Resources], strategy: Strategy, capacity: Capacity,
                     layout: Layout, plain: Plain) -> Assignment | None:
    """A node for each bundle meeting `layout`, or None; `plain`: placement without one."""
    if strategy is Strategy.STRICT_PACK:  # one node: in one domain of every level there is
        levels = layout.levels
        able = [n for n in capacity.node_ids if all(k in capacity.labels(n) for k in levels)]
        return plain(bundles, strategy, capacity.subset(able))
    return DomainPlacer(bundles, strategy, capacity, plain).run(layout)


class DomainPlacer:
    """One placement under a layout: bundles are committed on the capacity as they are
    placed (with undo), and all of it is undone at the end."""

    def __init__(self, bundles: Sequence[Resources], strategy: Strategy, capacity: Capacity,
                 plain: Plain):
        self.bundles, self.strategy, self.capacity, self.plain = bundles, strategy, capacity, plain
        self.assignment = [""] * len(bundles)
        self.used: set[str] = set()  # nodes holding a bundle of this gang
        self._undos: list[tuple[Undo, list[int]]] = []  # with the bundles each placed

    def run(self, layout: Layout) -> Assignment | None:
        try:
            everything = list(range(len(self.bundles)))
            if self.rule(layout.gang, everything, self.capacity.node_ids, layout.roles):
                return tuple(self.assignment)
            return None
        finally:
            self.rollback(0)

    # Rules, outermost first --------------------------------------------------------------
    def rule(self, rule: Topology | None, indices: list[int], region: list[str],
             roles: tuple[Span, ...] = ()) -> bool:
        """Place `indices` on `region` under `rule` (and the roles' own rules inside)."""
        if rule is not None and rule.required is not None:
            for domain in self.roomy(rule.required, region, indices, least_first=True):
                if self._attempt(partial(self._preferred, rule, indices, domain, roles)):
                    return True
            return False
        return self._preferred(rule, indices, region, roles)

    def _preferred(self, rule: Topology | None, indices: list[int], region: list[str],
                   roles: tuple[Span, ...]) -> bool:
        if rule is None or rule.preferred is None:
            return self._inner(rule, indices, region, roles, None)
        for domain in self.roomy(rule.preferred, region, indices, least_first=True):
            if self._attempt(partial(self._inner, rule, indices, domain, roles, None)):
                return True
        if self._attempt(partial(self._inner, rule, indices, region, roles, rule.preferred)):
            return True
        # Never a reason to wait: where filling domain by domain finds no way (a strategy
        # whose parts do not cut by rank), placed as if it were not asked for.
        return self._inner(rule, indices, region, roles, None)

    def _inner(self, rule: Topology | None, indices: list[int], region: list[str],
               roles: tuple[Span, ...], fewest: str | None) -> bool:
        """Segments, or the roles with rules of their own then the others; `fewest`: a
        preferred level no single domain of which holds them all."""
        if rule is not None and rule.segment is not None:
            return self.segments(rule, indices, region, fewest)
        ruled: set[int] = set()
        for span in roles:
            mine = list(range(span.start, span.stop))
            if not self.rule(span.rule, mine, region):
                return False
            ruled.update(mine)
        rest = [i for i in indices if i not in ruled]
        if not rest:
            return True
        if fewest is not None:
            return self._fewest(rest, region, fewest)
        return self.fill(rest, region)

    def segments(self, rule: Topology, indices: list[int], region: list[str],
                 fewest: str | None) -> bool:
        assert rule.segment is not None and rule.segment_level is not None
        size, level = rule.segment, rule.segment_level
        inside = set(region)
        domains = {v: [n for n in ids if n in inside]
                   for v, ids in self.capacity.domains(level).items()}
        previous: str | None = None
        for start in range(0, len(indices), size):
            chunk = indices[start:start + size]
            need = self.demand(chunk)
            names = need.names_by_scarcity()
            touched = self._touched(fewest)
            order = sorted(
                (v for v, ids in domains.items() if ids),
                key=lambda v: (v != previous, not _meets(domains[v], touched, fewest, self),
                               tuple(-x for x in self.free_in(domains[v]).vector(tuple(names))),
                               v))
            for value in order:
                if need.fits_in(self.free_in(domains[value])) and self.fill(chunk, domains[value]):
                    previous = value
                    break
            else:
                return False
        return True

    def _touched(self, level: str | None) -> set[str]:
        if level is None:
            return set()
        return {self.capacity.labels(n).get(level, n) for n in self.used}

    def _fewest(self, indices: list[int], region: list[str], level: str) -> bool:
        """Fill the roomiest domains of `level` first, each with the longest run of
        consecutive ranks it holds (nodes without the label: a domain each)."""
        names = tuple(self.demand(indices).names_by_scarcity())
        groups = self.groups(level, region)
        order = sorted(groups, key=lambda v: (
            tuple(-x for x in self.free_in(groups[v]).vector(names)), v))
        left = indices
        for value in order:
            taken = self._longest_run(left, groups[value])
            left = left[taken:]
            if not left:
                return True
        return False

    def _longest_run(self, indices: list[int], nodes: list[str]) -> int:
        """How many of `indices`, from the first, are placed on `nodes` (committed): the
        longest prefix that fits, by binary search."""
        low, high, best = 0, len(indices), None
        while low < high:
            mid = (low + high + 1) // 2
            found = self._plain(indices[:mid], nodes)
            if found is None:
                high = mid - 1
            else:
                low, best = mid, found
        if best is None:
            return 0
        self._commit(indices[:low], best)
        return low

    # Plain placement on a set of nodes ---------------------------------------------------
    def fill(self, indices: list[int], nodes: list[str]) -> bool:
        found = self._plain(indices, nodes)
        if found is None:
            return False
        self._commit(indices, found)
        return True

    def _plain(self, indices: list[int], nodes: list[str]) -> Assignment | None:
        if self.strategy is Strategy.STRICT_SPREAD:  # distinct from the other parts' too
            nodes = [n for n in nodes if n not in self.used]
        return self.plain([self.bundles[i] for i in indices], self.strategy,
                          self.capacity.subset(nodes))

    def _commit(self, indices: list[int], nodes: Assignment) -> None:
        pairs = []
        for i, node in zip(indices, nodes, strict=True):
            self.assignment[i] = node
            self.used.add(node)
            pairs.append((node, self.bundles[i]))
        self._undos.append((self.capacity.reserve(pairs), indices))

    def _attempt(self, step: Callable[[], bool]) -> bool:
        """Run `step`; if it fails, take back what it committed."""
        mark = len(self._undos)
        if step():
            return True
        self.rollback(mark)
        return False

    def rollback(self, mark: int) -> None:
        if len(self._undos) <= mark:
            return
        while len(self._undos) > mark:
            undo, indices = self._undos.pop()
            undo()
            for i in indices:
                self.assignment[i] = ""
        self.used = {n for n in self.assignment if n}

    # Domains -----------------------------------------------------------------------------
    def demand(self, indices: list[int]) -> Resources:
        return Resources.sum(self.bundles[i] for i in indices)

    def free_in(self, nodes: list[str]) -> Resources:
        return Resources.sum(self.capacity.free(n).positive() for n in nodes)

    def groups(self, level: str, region: list[str]) -> dict[str, list[str]]:
        """Nodes of `region` by value of `level`; a node without it alone (by its id)."""
        out: dict[str, list[str]] = {}
        for node in region:
            out.setdefault(self.capacity.labels(node).get(level, "\0" + node), []).append(node)
        return out

    def roomy(self, level: str, region: list[str], indices: list[int],
              least_first: bool) -> list[list[str]]:
        """The domains of `level` within `region` with room for `indices` in all, the
        least free first (scarcest resource first), then by label value."""
        need = self.demand(indices)
        names = tuple(need.names_by_scarcity())
        inside = set(region)
        found = []
        for value, ids in self.capacity.domains(level).items():
            nodes = [n for n in ids if n in inside]
            free = self.free_in(nodes)
            if nodes and need.fits_in(free):
                found.append((free.vector(names), value, nodes))
        found.sort(key=lambda f: (f[0] if least_first else tuple(-x for x in f[0]), f[1]))
        return [nodes for _, _, nodes in found]


def _meets(nodes: list[str], touched: set[str], level: str | None, placer: DomainPlacer) -> bool:
    """Whether a segment domain lies in a domain of `level` the gang already uses."""
    if level is None or not touched:
        return False
    return any(placer.capacity.labels(n).get(level, n) in touched for n in nodes)
