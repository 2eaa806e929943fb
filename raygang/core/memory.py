"""What a scheduler keeps from one cycle to the next (`CycleMemory`), so that a cycle
costs what changed since the last one, with the very same decisions.

A cycle is a pure function of its inputs (`core.schedule`). From one cycle to the next
most of those inputs are the very same objects (the control plane hands a cycle the same
node and gang views while they do not change), and a busy cluster's cycles often end on
the same free capacity. What a cycle works out from them is kept here, each entry under
what it was worked out from, and used again only when that is the same (the same objects,
or equal values).

The memory belongs to whoever runs the cycles, one per scheduler (`core.schedule.Scheduler`
keeps one; the simulator has one per control plane), never to the module: two schedulers
in one process (two simulated planes, a test's) keep apart, and a cycle run without one
keeps nothing beyond itself. Every entry is built whole and then replaced whole, never
changed in place once kept, so a cycle in one thread and a dump or report in another see
one entry or the other, never half of one: at worst one misses and works it out again.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from raygang.core.resources import Sums

if TYPE_CHECKING:  # what the entries hold, for the type checker only
    from raygang.core.capacity import KeptCapacity
    from raygang.core.gang import Shape
    from raygang.core.queues import QueueTree
    from raygang.core.resources import Resources

    from raygang.core.snapshot import PlacedGang

    Fair = tuple[QueueTree, Resources, dict[str, Resources], dict[str, dict[str, float]]]
    Book = tuple[QueueTree, tuple[PlacedGang, ...], dict[str, Resources],
                 dict[str, Resources]]


class CycleMemory:
    """What cycles of one scheduler keep for the next (see the module): the free capacity
    the last cycle started from, sums of vectors (`Sums`: what each queue's gangs hold, in
    all and in non-preemptible classes, the cluster's capacity), each queue's usage for
    the last held gangs, the fair shares of the last demand, why shapes do not fit on the
    last free capacity, and which shapes fit the alive nodes at all."""

    __slots__ = ("capacity", "used", "firm", "cluster", "book", "fair", "unplaced", "_ever")

    def __init__(self) -> None:
        # core.capacity: the free capacity a cycle started from, with its nodes
        self.capacity: KeptCapacity | None = None
        self.used = Sums()  # core.fairshare: what each queue's gangs hold, by queue
        self.firm = Sums()  # ... of those, in gangs of non-preemptible classes
        self.cluster = Sums()  # ... the alive nodes' capacity
        # core.fairshare: (queue tree, the held gangs, each queue's usage, each leaf's in
        # non-preemptible classes) for the very same tree and tuple of held gangs (the
        # control plane hands a cycle the same tuple while no held gang changed)
        self.book: Book | None = None
        # core.fairshare: (queue tree, cluster, each leaf's demand, the fair shares), where
        # usage over time does not move them (a pure function of the three then)
        self.fair: Fair | None = None
        # core.reasons: (a capacity's signature, shape -> why it does not fit there),
        # for shapes without a topology
        self.unplaced: tuple[tuple[object, ...], Mapping[Shape, str]] = ((), {})
        # core.placement.EverFits, for shapes without a topology and for those with one
        # (which depend on the nodes' labels too): (the alive nodes' totals, or those and
        # their labels; shape -> whether it fits them empty). The one entry that grows in
        # place: each answer is a plain boolean, final for those nodes and set at once (a
        # reader in another thread sees it, or works it out again).
        self._ever: dict[bool, tuple[tuple[object, ...], dict[Shape, bool]]] = {}

    def ever_fits(self, signature: tuple[object, ...], labelled: bool = False
                  ) -> dict[Shape, bool]:
        """Whether each shape fits the nodes of `signature` empty, as far as worked out:
        the same mapping while the last signature of its kind (`labelled` or not) is the
        same, a new one once it is not."""
        kept = self._ever.get(labelled)
        if kept is None or kept[0] != signature:
            kept = self._ever[labelled] = (signature, {})
        return kept[1]
