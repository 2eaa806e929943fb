"""Capacity that this cycle's victims free, and who must wait for it.

A victim is stopped after its grace period, so what it holds is free only then. Its
preemptor is admitted at once onto those nodes and waits for its victims before it
reserves. When the victims free more than the preemptor needs, the rest may go to other
gangs in the same cycle (a second preemptor need not stop another gang for it), but each
such gang then waits too, for the victims on the nodes whose draining capacity it takes:
its admission says so (`Admission.waits_for`), so that its status, a dry run and its
reservation timeout count from the moment the capacity is really free.

Per node, an admission takes settled capacity (free before any victim of this cycle)
first, unless it waits for every gang draining there anyway (its own victims): then it
takes the draining capacity first and leaves the settled capacity to others.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from raygang.core.capacity import Capacity
from raygang.core.resources import Resources
from raygang.core.snapshot import PlacedGang


class Draining:
    def __init__(self, capacity: Capacity):
        self._capacity = capacity
        self._pool: dict[str, Resources] = {}  # node -> freed by victims, not yet taken
        self._by: dict[str, set[str]] = {}  # node -> the victims freeing it

    def add(self, victims: Iterable[PlacedGang]) -> None:
        """`victims` were chosen this cycle (and freed on the capacity)."""
        for victim in victims:
            for node, bundle in victim.bundles:
                if node in self._capacity:
                    self._pool[node] = self._pool.get(node, Resources()) + bundle
                    self._by.setdefault(node, set()).add(victim.gang_id)

    def saved(self, nodes: Iterable[str]) -> Callable[[], None]:
        """A function that puts back what `nodes` have draining now (a statement's undo)."""
        was = {n: (self._pool.get(n), set(self._by.get(n, ()))) for n in nodes}

        def restore() -> None:
            for node, (pool, by) in was.items():
                if pool is None:
                    self._pool.pop(node, None)
                    self._by.pop(node, None)
                else:
                    self._pool[node], self._by[node] = pool, by
        return restore

    def settled(self, node: str) -> Resources:
        """What is free on `node` apart from what gangs being stopped will free there."""
        pool = self._pool.get(node)
        return self._capacity.free(node) if not pool else self._capacity.free(node) - pool

    def take(self, nodes: Sequence[str], bundles: Sequence[Resources],
             victims: Iterable[str] = ()) -> tuple[str, ...]:
        """An admission of `bundles` on `nodes` (not yet reserved on the capacity) whose own
        victims are `victims`: the gangs being stopped it must wait for, sorted (its
        victims included), with what it takes of their capacity taken."""
        waits = set(victims)
        if not self._pool:
            return tuple(sorted(waits))
        demand: dict[str, Resources] = {}
        for node, bundle in zip(nodes, bundles, strict=True):
            demand[node] = demand.get(node, Resources()) + bundle
        for node, need in demand.items():
            pool = self._pool.get(node)
            if not pool:
                continue
            stopping = self._by[node]
            if stopping <= waits:  # waits for all of them anyway: their capacity first
                taken = need.minimum(pool)
            else:  # settled capacity first; only what it lacks comes from the victims
                taken = need.shortfall(self._capacity.free(node) - pool).minimum(pool)
            if taken:
                waits |= stopping
                self._pool[node] = pool - taken
        return tuple(sorted(waits))
