"""A scratch copy of free resources per node for one cycle, with undo.

Nodes whose free vectors are identical form one class: a search for the best node looks
at each distinct free vector once instead of at every node. A pool of 1,000 identical
8-GPU nodes is a handful of classes, which is what makes a 10,000-gang cycle cheap.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from raygang.core.memory import CycleMemory
from raygang.core.resources import Resources, per_node, scarcity_key
from raygang.core.snapshot import NodeState

Undo = Callable[[], None]


class Capacity:
    def __init__(self, nodes: Iterable[NodeState], *, use_totals: bool = False,
                 memory: CycleMemory | None = None):
        """Free resources of `nodes`; with `use_totals` the cluster as if it were empty.
        `memory`: the scheduler's (`core.memory`), where the capacity its last cycle
        started from is kept: made again from it where only what is free on some nodes
        changed (from one cycle to the next, a few nodes do), as it would be made anew."""
        nodes = tuple(nodes)
        # Labels are read only for gangs that ask for a topology: kept as the nodes came,
        # indexed when first asked (`labels`, `domains`).
        self._labels: dict[str, Mapping[str, str]] | None = None
        self._domains: dict[str, dict[str, list[str]]] = {}
        kept = None if memory is None or use_totals else memory.capacity
        if kept is None or not self._again(kept, nodes):
            self._build(nodes, use_totals)
        if memory is not None and not use_totals:
            memory.capacity = (nodes, (dict(self._free), dict(self._total),
                                       dict(self._display),
                                       {f: tuple(ids) for f, ids in self._classes.items()},
                                       self.free_total, self.resource_names, self._order))

    def _build(self, nodes: tuple[NodeState, ...], use_totals: bool) -> None:
        self._free: dict[str, Resources] = {}
        self._total: dict[str, Resources] = {}
        self._display: dict[str, str] = {}
        self._classes: dict[Resources, list[str]] = {}
        self._order = sorted(range(len(nodes)), key=lambda i: nodes[i].node_id)
        self._nodes = [nodes[i] for i in self._order]  # by id
        for node in self._nodes:
            node_id = node.node_id
            free = node.total if use_totals else node.free
            self._free[node_id] = free
            self._total[node_id] = node.total
            self._display[node_id] = node.display
            self._classes.setdefault(free, []).append(node_id)  # sorted: ids come in order
        # A cheap "cannot fit" test: what is free in all (a node booked beyond its total,
        # while a gang leaves it, adds nothing rather than taking from the others).
        self.free_total = Resources.sum([f.positive() for f in self._free.values()])
        names: set[str] = set()
        for total in set(self._total.values()):  # a few distinct totals, each read once
            names.update(total)
        # Best fit compares what a node would have left, scarcest resource first.
        self.resource_names: tuple[str, ...] = tuple(sorted(names, key=scarcity_key))

    def _again(self, kept: KeptCapacity, nodes: tuple[NodeState, ...]) -> bool:
        """Made from the capacity `kept` (of the nodes then) if the nodes are the same
        but for what is free on some (True), as `_build` would make it; else False."""
        was, (free, total, display, classes, free_total, names, order) = kept
        if len(was) != len(nodes):
            return False
        changed = [i for i, same in enumerate(map(operator.is_, was, nodes)) if not same]
        for i in changed:
            old, new = was[i], nodes[i]
            if old.node_id != new.node_id or old.total != new.total or \
                    old.display != new.display:
                return False
        self._free, self._total, self._display = dict(free), dict(total), dict(display)
        self._classes = {f: list(ids) for f, ids in classes.items()}
        self._order = order
        self._nodes = list(map(nodes.__getitem__, order))
        self.free_total, self.resource_names = free_total, names
        for i in changed:
            self._set_free(nodes[i].node_id, nodes[i].free)
        if changed:  # in the order `_build` meets them: by their first node
            self._classes = dict(sorted(self._classes.items(), key=_first_id))
        return True

    # Reading ----------------------------------------------------------------------------
    def __contains__(self, node_id: object) -> bool:
        return node_id in self._free

    def free(self, node_id: str) -> Resources:
        return self._free[node_id]

    def total(self, node_id: str) -> Resources:
        return self._total[node_id]

    def display(self, node_id: str) -> str:
        return self._display[node_id]

    @property
    def node_ids(self) -> list[str]:
        return list(self._free)

    def labels(self, node_id: str) -> Mapping[str, str]:
        if self._labels is None:
            self._labels = {n.node_id: n.labels for n in self._nodes if n.node_id in self._free}
        return self._labels[node_id]

    def domains(self, level: str) -> dict[str, list[str]]:
        """The nodes of each value of label `level` (sorted ids), values in sorted order;
        nodes without the label are in none."""
        found = self._domains.get(level)
        if found is None:
            found = {}
            for node_id in self._free:  # in id order: each list comes out sorted
                value = self.labels(node_id).get(level)
                if value is not None:
                    found.setdefault(value, []).append(node_id)
            found = self._domains[level] = dict(sorted(found.items()))
        return found

    def subset(self, node_ids: Iterable[str]) -> Capacity:
        """A scratch capacity of these nodes with what is free on them now (neither
        sees the other's changes); best fit compares resources as this one does."""
        sub = Capacity(())
        for node_id in sorted(node_ids):
            free = self._free[node_id]
            sub._free[node_id] = free
            sub._total[node_id] = self._total[node_id]
            sub._display[node_id] = self._display[node_id]
            sub._classes.setdefault(free, []).append(node_id)
        sub.free_total = Resources.sum(f.positive() for f in sub._free.values())
        sub.resource_names = self.resource_names
        sub._labels = {n: self.labels(n) for n in sub._free}
        return sub

    def signature(self) -> tuple[object, ...]:
        """What every reading of this capacity's free room answers from, as a value: the
        free vector classes in their order with their nodes, each node's name, the
        resource names (labels aside). Two capacities of equal signatures answer alike
        (`core.reasons` keeps its words for a capacity from one cycle to the next)."""
        return (tuple((free, tuple(ids)) for free, ids in self._classes.items()),
                tuple(self._display.items()), self.resource_names)

    def classes(self) -> Iterator[tuple[Resources, list[str]]]:
        """(free vector, sorted node ids having exactly it), for every distinct free vector."""
        return iter(self._classes.items())

    def leftover_key(self, free: Resources, demand: Resources) -> tuple[int, ...]:
        """Best-fit score: smaller means tighter. Scarce resources (GPU) are compared first,
        so work that needs no GPU prefers nodes without free GPUs."""
        return tuple(free.units(n) - demand.units(n) for n in self.resource_names)

    def best_node(
        self,
        demand: Resources,
        *,
        exclude: set[str] | frozenset[str] = frozenset(),
        among: Iterable[str] | None = None,
    ) -> str | None:
        """The node where `demand` fits tightest (ties: lowest node id), or None."""
        if among is not None:
            fitting = [n for n in among if n not in exclude and demand.fits_in(self._free[n])]
            if not fitting:
                return None
            return min(fitting, key=lambda n: (self.leftover_key(self._free[n], demand), n))
        best: tuple[tuple[int, ...], str] | None = None
        for free, ids in self._classes.items():
            if not demand.fits_in(free):
                continue
            node = _first_not_in(ids, exclude)
            if node is None:
                continue
            key = (self.leftover_key(free, demand), node)
            if best is None or key < best:
                best = key
        return None if best is None else best[1]

    # Growing the pool (the scale simulation adds nodes that do not exist yet) -----------
    def add_node(self, node: NodeState) -> None:
        """Add a node with `node.free` free; its id must be new and sort after no other
        node's in a way that matters only for ties (ids decide ties)."""
        if node.node_id in self._free:
            raise ValueError(f"node {node.node_id!r} is already in the capacity")
        self._free[node.node_id] = node.free
        self._total[node.node_id] = node.total
        self._display[node.node_id] = node.display
        self._nodes.append(node)
        if self._labels is not None:
            self._labels[node.node_id] = node.labels
        self._domains.clear()
        bisect.insort(self._classes.setdefault(node.free, []), node.node_id)
        self.free_total = self.free_total + node.free.positive()
        if any(name not in self.resource_names for name in node.total):
            names = set(self.resource_names) | set(node.total)
            self.resource_names = tuple(sorted(names, key=scarcity_key))

    def remove_node(self, node_id: str) -> None:
        """Take a node out again (the undo of `add_node`)."""
        free = self._free.pop(node_id)
        del self._total[node_id], self._display[node_id]
        if self._labels is not None:  # (`_nodes` keeps it: `labels` reads those in `_free`)
            del self._labels[node_id]
        self._domains.clear()
        ids = self._classes[free]
        del ids[bisect.bisect_left(ids, node_id)]
        if not ids:
            del self._classes[free]
        self.free_total = self.free_total - free.positive()

    # Tentative changes ------------------------------------------------------------------
    def reserve(self, assignment: Iterable[tuple[str, Resources]]) -> Undo:
        """Take each bundle from its node; returns a function that puts them back. (The
        bundles are summed per node first: a gang's members on one node move that node
        from one class to another once, to where bundle by bundle would have.)"""
        taken = list(per_node(assignment).items())
        for node_id, bundle in taken:
            self._set_free(node_id, self._free[node_id] - bundle)

        def undo() -> None:
            for node_id, bundle in reversed(taken):
                self._set_free(node_id, self._free[node_id] + bundle)

        return undo

    def release(self, assignment: Iterable[tuple[str, Resources]]) -> Undo:
        """Give each bundle back to its node (nodes not in this capacity are skipped);
        returns a function that takes them again."""
        given = [(node_id, bundle) for node_id, bundle in per_node(assignment).items()
                 if node_id in self._free]  # (summed per node, as `reserve`)
        for node_id, bundle in given:
            self._set_free(node_id, self._free[node_id] + bundle)

        def undo() -> None:
            for node_id, bundle in reversed(given):
                self._set_free(node_id, self._free[node_id] - bundle)

        return undo

    def _set_free(self, node_id: str, free: Resources) -> None:
        old = self._free[node_id]
        self.free_total = self.free_total - old.positive() + free.positive()
        ids = self._classes[old]
        del ids[bisect.bisect_left(ids, node_id)]
        if not ids:
            del self._classes[old]
        self._free[node_id] = free
        bisect.insort(self._classes.setdefault(free, []), node_id)


_node_id = operator.attrgetter("node_id")


def _first_id(item: tuple[Resources, list[str]]) -> str:
    return item[1][0]


# What `CycleMemory.capacity` holds: (the nodes, (free, total and name by node, node ids
# by free vector, what is free in all, resource names, the nodes' order by id)).
KeptCapacity = tuple[tuple[NodeState, ...],
                     tuple[dict[str, Resources], dict[str, Resources], dict[str, str],
                           dict[Resources, tuple[str, ...]], Resources, tuple[str, ...],
                           list[int]]]


def _first_not_in(ids: Sequence[str], exclude: set[str] | frozenset[str]) -> str | None:
    if not exclude:
        return ids[0]
    for node_id in ids:
        if node_id not in exclude:
            return node_id
    return None
