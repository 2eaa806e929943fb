"""Choosing whole gangs to stop so that a pending gang fits (reclaim and preempt).

The search runs on the cycle's scratch capacity and queue usage, with undo, as Kueue's
preemptor and KAI's statements do: free candidates one by one (least important first)
until the gang fits on real nodes — placement, not just totals — then give back, most
important first, every victim the gang turns out not to need. If the gang would not fit
even with every candidate gone, nothing is touched.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from raygang.core.capacity import Capacity
from raygang.core.fairshare import QueueBook
from raygang.core.gang import PendingGang
from raygang.core.placement import place
from raygang.core.resources import scarcity_key
from raygang.core.snapshot import PlacedGang

Undo = Callable[[], None]


def victim_order(gang: PlacedGang) -> tuple:
    """Least important first: lowest priority, then most recently started (one not yet
    running counts as the most recent), then smallest (scarcest resource first), then id."""
    started = gang.running_since if gang.running_since is not None else math.inf
    size = tuple(gang.total.units(n) for n in sorted(gang.total, key=scarcity_key))
    return (gang.priority, -started, size, gang.gang_id)


def in_quota_gangs(book: QueueBook, placed: Sequence[PlacedGang]) -> set[str]:
    """Ids of gangs that run within their own queue's quota: walking each queue's gangs
    most important first (highest priority, longest running), those whose running total
    still fits in the quota. Reclaim never takes these."""
    by_queue: dict[str, list[PlacedGang]] = {}
    for gang in placed:
        if gang.queue in book.tree.specs:
            by_queue.setdefault(gang.queue, []).append(gang)
    inside: set[str] = set()
    for queue, gangs in by_queue.items():
        quota = book.tree.specs[queue].quota
        used = quota - quota  # zero
        for gang in sorted(gangs, key=lambda g: (-g.priority, g.running_since or math.inf,
                                                 g.gang_id)):
            if not (used + gang.total).fits_in(quota):
                break
            used = used + gang.total
            inside.add(gang.gang_id)
    return inside


class VictimSearch:
    """One search for one pending gang against the cycle's scratch state."""

    def __init__(self, gang: PendingGang, capacity: Capacity, book: QueueBook):
        self.gang = gang
        self.capacity = capacity
        self.book = book

    def _free(self, victim: PlacedGang) -> Undo:
        undo_nodes = self.capacity.release(victim.bundles)
        known = victim.queue in self.book.tree.specs
        undo_usage = self.book.remove(victim.queue, victim.total) if known else None

        def undo() -> None:
            undo_nodes()
            if undo_usage is not None:
                undo_usage()

        return undo

    def _fits(self) -> tuple[str, ...] | None:
        gang = self.gang
        if not gang.total.fits_in(self.capacity.free_total):
            return None  # cheap: not even the totals are there
        if self.book.limit_problem(gang.queue, gang.total) is not None:
            return None
        return place(gang.bundles, gang.strategy, self.capacity)

    def run(
        self, candidates: Sequence[PlacedGang]
    ) -> tuple[tuple[str, ...], list[PlacedGang]] | None:
        """(nodes for the gang, victims) with the victims' resources left freed on the
        scratch state, or None with the scratch state untouched."""
        nodes = self._fits()
        if nodes is not None:
            return nodes, []
        if not candidates:
            return None
        undos = [self._free(v) for v in candidates]  # could it fit with all of them gone?
        possible = self._fits() is not None
        for undo in reversed(undos):
            undo()
        if not possible:
            return None
        chosen: list[PlacedGang] = []
        undos = []
        for victim in candidates:
            undos.append(self._free(victim))
            chosen.append(victim)
            if self._fits() is not None:
                break
        # Give back every victim not needed, most important first. The last one taken is
        # needed by construction (the gang did not fit before it).
        needed = [True] * len(chosen)
        for i in range(len(chosen) - 2, -1, -1):
            undos[i]()
            if self._fits() is not None:
                needed[i] = False
            else:
                undos[i] = self._free(chosen[i])
        nodes = self._fits()
        assert nodes is not None, "the victim search lost a fit it had found"
        return nodes, [v for v, keep in zip(chosen, needed) if keep]
