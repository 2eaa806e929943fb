"""Why a gang does not fit, in words with numbers.

Called only for gangs that `place` could not place; it scans the capacity's classes of
identical free vectors, not its nodes one by one.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Sequence
from itertools import islice

from raygang.core.capacity import Capacity
from raygang.core.resources import Resources, format_amount
from raygang.core.spec import Strategy

_LISTED_NODES = 4


def describe_bundles(bundles: Sequence[Resources]) -> str:
    """`4×{GPU: 1}` or `1×{CPU: 1} + 4×{GPU: 1}` (shapes in first-seen order)."""
    counts = Counter(bundles)
    return " + ".join(f"{n}×{shape}" for shape, n in counts.items())


def why_not(bundles: Sequence[Resources], strategy: Strategy, capacity: Capacity) -> str:
    """Why `bundles` cannot be placed under `strategy` on `capacity` right now (a gang
    with a topology: `domain_reasons.why_not_placed`)."""
    total = sum(bundles, Resources())
    unknown = [n for n in total.names_by_scarcity() if n not in capacity.resource_names]
    if unknown:
        return f"needs resource {unknown[0]!r}, which no alive node has"
    shape = f"{strategy.value}, {describe_bundles(bundles)}"
    if strategy is Strategy.STRICT_PACK:
        return f"needs {total} on one node ({shape}); {_largest_on_one_node(total, capacity)}"
    if strategy is Strategy.STRICT_SPREAD:
        return _strict_spread_reason(bundles, shape, capacity)
    cluster_free = capacity.free_total
    missing = total.shortfall(cluster_free)
    if missing:
        name = missing.names_by_scarcity()[0]
        # A node can be booked beyond its total while a preempted gang still stops there
        # (its successor is booked already): it has none free, not a negative amount.
        free = sum(max(0.0, vector.get(name)) * len(ids) for vector, ids in capacity.classes())
        return (
            f"needs {total} in all ({shape}); free in the cluster is "
            f"{name} {format_amount(name, free)}{_by_node(name, capacity)}"
        )
    for bundle in sorted(set(bundles), key=lambda b: [-b.units(n) for n in capacity.resource_names]):
        if capacity.best_node(bundle) is None:
            return f"bundle {bundle} fits on no node ({shape}); {_largest_on_one_node(bundle, capacity)}"
    name = total.names_by_scarcity()[0]
    return (
        f"needs {total} ({shape}); enough is free in all but it is fragmented across nodes: "
        f"{name} free{_by_node(name, capacity)}"
    )


def _largest_on_one_node(demand: Resources, capacity: Capacity) -> str:
    """Name the first resource (scarcest first) no single node has enough of."""
    for name in demand.names_by_scarcity():
        # Most free first; among equal amounts the lowest node id (first of its class).
        node = min((-free.units(name), ids[0]) for free, ids in capacity.classes())[1]
        most = capacity.free(node).get(name)
        if most < demand[name]:
            return (
                f"largest free {name} on one node is {format_amount(name, most)} "
                f"(node {capacity.display(node)})"
            )
    # Every resource alone is somewhere; no node has all of them together.
    closest = min(
        (len(demand.shortfall(free)), capacity.leftover_key(free, Resources()), ids[0])
        for free, ids in capacity.classes()
    )[2]
    return (
        f"no node has all of it free at once; closest is node {capacity.display(closest)} "
        f"with {capacity.free(closest).only(set(demand))} free"
    )


def _strict_spread_reason(bundles: Sequence[Resources], shape: str, capacity: Capacity) -> str:
    # Name a bundle that proves it: the bundles at least as large as `bundle` each need a
    # distinct node that can hold `bundle`. Counting only for the smallest bundle says nothing
    # when a larger one fits nowhere. Without such a proof this ends on the smallest bundle.
    by_size = sorted(set(bundles), key=lambda b: [-b.units(n) for n in capacity.resource_names])
    for bundle in by_size:
        able = [ids for free, ids in capacity.classes() if bundle.fits_in(free)]
        count = sum(len(ids) for ids in able)
        if count < sum(1 for other in bundles if bundle.fits_in(other)):
            break
    first = list(islice(heapq.merge(*able), _LISTED_NODES))  # lowest ids: node_ids order
    listed = ", ".join(capacity.display(n) for n in first)
    more = f" and {count - _LISTED_NODES} more" if count > _LISTED_NODES else ""
    which = f": {listed}{more}" if count else ""
    return (
        f"needs {len(bundles)} distinct nodes ({shape}); only {count} "
        f"node{'s' if count != 1 else ''} can hold {bundle}{which}"
    )


def _by_node(name: str, capacity: Capacity) -> str:
    """` (w-1: 2, w-2: 1, 6 nodes with none)`: where `name` is free, most first."""
    by_amount: dict[int, list[list[str]]] = {}  # units free -> id lists of those classes
    for free, ids in capacity.classes():
        if free.units(name) > 0:
            by_amount.setdefault(free.units(name), []).append(ids)
    having = sum(len(ids) for lists in by_amount.values() for ids in lists)
    most_first = (n for units in sorted(by_amount, reverse=True)
                  for n in heapq.merge(*by_amount[units]))  # ties: lowest id first
    parts = [
        f"{capacity.display(n)}: {format_amount(name, capacity.free(n)[name])}"
        for n in islice(most_first, _LISTED_NODES)
    ]
    if having > _LISTED_NODES:
        parts.append(f"{having - _LISTED_NODES} more")
    none = len(capacity.node_ids) - having
    if none:
        parts.append(f"{none} node{'s' if none != 1 else ''} with none")
    return f" ({', '.join(parts)})" if parts else ""
