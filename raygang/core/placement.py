"""Choose a node for every bundle of a gang, for each Ray placement strategy.

The result is pinned on Ray with `bundle_label_selector=[{"ray.io/node-id": ...}]`, so it
must be an assignment Ray accepts: STRICT_PACK on one node, STRICT_SPREAD on distinct
nodes, and every node holding what is assigned to it. Searches are greedy (largest bundle
first), like Ray's own bundle scheduling, and deterministic: ties go to the lowest node id.
`place` leaves `capacity` as it found it. A gang that asks for a topology (its `layout`)
is placed by domains of node labels (core/domains.py), with these searches inside them.
"""

from __future__ import annotations

from collections.abc import Sequence

from raygang.core.capacity import Capacity, Undo
from raygang.core.domains import place_in_domains
from raygang.core.gang import PendingGang, Shape
from raygang.core.memory import CycleMemory
from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot
from raygang.core.spec import Strategy
from raygang.core.topology import Layout

Assignment = tuple[str, ...]  # node id per bundle, in bundle (rank) order


def place(
    bundles: Sequence[Resources], strategy: Strategy, capacity: Capacity,
    layout: Layout | None = None,
) -> Assignment | None:
    """A node for each bundle under `strategy` on the free capacity (and within the
    domains `layout` asks for), or None if none now."""
    if layout is not None:
        return place_in_domains(bundles, strategy, capacity, layout, place)
    if strategy is Strategy.STRICT_PACK:
        return _on_one_node(bundles, capacity)
    if strategy is Strategy.STRICT_SPREAD:
        return _strict_spread(bundles, capacity)
    if strategy is Strategy.SPREAD:
        return _spread(bundles, capacity)
    return _on_one_node(bundles, capacity) or _pack(bundles, capacity)


def place_gang(gang: PendingGang, capacity: Capacity) -> Assignment | None:
    """`place` for a pending gang: its minimum's bundles, strategy and topology."""
    return place(gang.bundles, gang.strategy, capacity, gang.layout)


def largest_first(bundles: Sequence[Resources], capacity: Capacity) -> list[int]:
    """Bundle indices, largest first (scarcest resource compared first), stable."""
    first = bundles[0] if bundles else None
    if all(bundle is first for bundle in bundles):  # one role's: the same vector, in order
        return list(range(len(bundles)))
    names = capacity.resource_names
    return sorted(range(len(bundles)), key=lambda i: tuple(-bundles[i].units(n) for n in names))


def _on_one_node(bundles: Sequence[Resources], capacity: Capacity) -> Assignment | None:
    node = capacity.best_node(Resources.sum(bundles))
    return None if node is None else (node,) * len(bundles)


def _strict_spread(bundles: Sequence[Resources], capacity: Capacity) -> Assignment | None:
    assignment: list[str] = [""] * len(bundles)
    used: set[str] = set()
    for i in largest_first(bundles, capacity):
        node = capacity.best_node(bundles[i], exclude=used)
        if node is None:
            return None
        assignment[i] = node
        used.add(node)
    return tuple(assignment)


def _spread(bundles: Sequence[Resources], capacity: Capacity) -> Assignment | None:
    """A distinct node per bundle where possible; shares nodes only when it must."""
    assignment: list[str] = [""] * len(bundles)
    used: set[str] = set()
    undos: list[Undo] = []
    try:
        for i in largest_first(bundles, capacity):
            node = capacity.best_node(bundles[i], exclude=used) or _least_shared(
                bundles[i], assignment, capacity
            )
            if node is None:
                return None
            assignment[i] = node
            used.add(node)
            undos.append(capacity.reserve([(node, bundles[i])]))
        return tuple(assignment)
    finally:
        for undo in reversed(undos):
            undo()


def _least_shared(
    bundle: Resources, assignment: list[str], capacity: Capacity
) -> str | None:
    """When SPREAD must share, the used node holding fewest of this gang's bundles (even
    spread, as Ray does), then the tightest fit, then the lowest id."""
    counts: dict[str, int] = {}
    for node in assignment:
        if node:
            counts[node] = counts.get(node, 0) + 1
    fitting = [n for n in counts if bundle.fits_in(capacity.free(n))]
    if not fitting:
        return None
    return min(fitting, key=lambda n: (counts[n], capacity.leftover_key(capacity.free(n), bundle), n))


def _pack(bundles: Sequence[Resources], capacity: Capacity) -> Assignment | None:
    """Fewest nodes: repeatedly open the node that hosts the most remaining bundles
    (first fit, largest first), ties to the tightest fit, then the lowest node id."""
    assignment: list[str] = [""] * len(bundles)
    remaining = largest_first(bundles, capacity)
    used: set[str] = set()
    undos: list[Undo] = []
    try:
        while remaining:
            # (key, node, hosted)
            best: tuple[tuple[object, ...], str, list[int]] | None = None
            for free, ids in capacity.classes():
                node = next((n for n in ids if n not in used), None)
                if node is None:
                    continue
                hosted, left = _first_fit(free, [(i, bundles[i]) for i in remaining])
                if not hosted:
                    continue
                key = (-len(hosted), capacity.leftover_key(left, Resources()), node)
                if best is None or key < best[0]:
                    best = (key, node, hosted)
            if best is None:
                return None
            _, node, hosted = best
            for i in hosted:
                assignment[i] = node
            used.add(node)
            undos.append(capacity.reserve([(node, bundles[i]) for i in hosted]))
            placed = set(hosted)
            remaining = [i for i in remaining if i not in placed]
        return tuple(assignment)
    finally:
        for undo in reversed(undos):
            undo()


def _first_fit(
    free: Resources, indexed: list[tuple[int, Resources]]
) -> tuple[list[int], Resources]:
    hosted: list[int] = []
    for i, bundle in indexed:
        if bundle.fits_in(free):
            free = free - bundle
            hosted.append(i)
    return hosted, free


class EverFits:
    """Whether a shape fits the cluster with nothing running, cached per shape: across
    cycles of one scheduler (its `CycleMemory`) while the alive nodes and their totals stay
    the same (the answers are plain booleans, safe to share between the loop's threads;
    the empty capacity is not, as placement reserves on it and undoes, so each instance
    builds its own when asked). Without a memory, the answers live as long as the instance."""

    def __init__(self, snapshot: ClusterSnapshot, memory: CycleMemory | None = None):
        self._snapshot = snapshot
        self._memory = CycleMemory() if memory is None else memory
        self._empty: Capacity | None = None
        signature = tuple((n.node_id, n.total) for n in snapshot.alive_nodes)
        self._cache = self._memory.ever_fits(signature)
        self._by_gang: dict[int, bool] = {}  # pending gangs live as long as the cycle
        self._signature = signature
        self._labelled: dict[Shape, bool] | None = None  # shapes with a topology

    @property
    def empty(self) -> Capacity:
        if self._empty is None:
            self._empty = Capacity(self._snapshot.alive_nodes, use_totals=True)
        return self._empty

    def fits(self, gang: PendingGang) -> bool:
        found = self._by_gang.get(id(gang))  # cheaper than hashing its shape again
        if found is None:
            found = self._by_gang[id(gang)] = self.fits_shape(gang.shape)
        return found

    def fits_shape(self, shape: Shape) -> bool:
        strategy, bundles, layout = shape
        cache = self._cache if layout is None else self._with_labels()
        found = cache.get(shape)
        if found is None:
            found = cache[shape] = place(bundles, strategy, self.empty, layout) is not None
        return found

    def _with_labels(self) -> dict[Shape, bool]:
        """Shapes with a topology depend on the nodes' labels too: their answers are kept
        under the labels as well, compared only in cycles that place such a gang."""
        if self._labelled is None:
            labels = tuple(tuple(sorted(n.labels.items())) for n in self._snapshot.alive_nodes)
            self._labelled = self._memory.ever_fits((self._signature, labels), labelled=True)
        return self._labelled
