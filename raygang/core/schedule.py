"""One scheduling cycle as a pure function: `schedule(snapshot, pending, config, now) -> Plan`."""

from __future__ import annotations

from collections.abc import Sequence
from types import MappingProxyType

from raygang.core.capacity import Capacity
from raygang.core.config import SchedulerConfig
from raygang.core.explain import why_not
from raygang.core.gang import PendingGang
from raygang.core.placement import place
from raygang.core.plan import Admission, Plan, WaitCode, Waiting
from raygang.core.snapshot import ClusterSnapshot
from raygang.core.spec import GangSpec


def schedule(
    snapshot: ClusterSnapshot,
    pending: Sequence[PendingGang],
    config: SchedulerConfig,
    now: float,
) -> Plan:
    """Admit pending gangs in their total order while they fit; say why the rest wait.

    Admissions are tried on a scratch copy of the free capacity. Capacity only shrinks
    during a cycle, so a shape (strategy + bundles) that did not fit will not fit later in
    the same cycle: it is not searched again. Without backfill the first gang that is
    blocked (and could fit on this cluster at all) holds back every gang after it.
    """
    capacity = Capacity(snapshot.alive_nodes)
    ever = _EverFits(snapshot)
    admissions: list[Admission] = []
    no_fit: list[PendingGang] = []
    behind: list[tuple[PendingGang, PendingGang]] = []
    failed_shapes: set = set()
    blocker: PendingGang | None = None

    for gang in sorted(pending, key=PendingGang.order_key):
        if blocker is not None and not config.backfill:
            behind.append((gang, blocker))
            continue
        nodes = None if gang.shape in failed_shapes else place(gang.bundles, gang.strategy, capacity)
        if nodes is None:
            failed_shapes.add(gang.shape)
            no_fit.append(gang)
            if blocker is None and ever.fits(gang):
                blocker = gang
            continue
        capacity.reserve(zip(nodes, gang.bundles))
        admissions.append(Admission(gang.gang_id, nodes))

    waiting = _reasons(no_fit, behind, capacity, ever)
    return Plan(tuple(admissions), MappingProxyType(waiting), at=now)


def unschedulable_reason(spec: GangSpec, snapshot: ClusterSnapshot) -> str | None:
    """Why `spec` could never fit on this cluster even if it were empty, or None."""
    empty = Capacity(snapshot.alive_nodes, use_totals=True)
    if not empty.node_ids:
        return "the cluster has no alive nodes"
    if place(spec.bundles, spec.strategy, empty) is not None:
        return None
    return why_not(spec.bundles, spec.strategy, empty) + " (even with the cluster empty)"


class _EverFits:
    """Whether a shape fits the cluster with nothing running, cached per shape."""

    def __init__(self, snapshot: ClusterSnapshot):
        self._snapshot = snapshot
        self._empty: Capacity | None = None
        self._cache: dict = {}

    @property
    def empty(self) -> Capacity:
        if self._empty is None:
            self._empty = Capacity(self._snapshot.alive_nodes, use_totals=True)
        return self._empty

    def fits(self, gang: PendingGang) -> bool:
        if gang.shape not in self._cache:
            self._cache[gang.shape] = place(gang.bundles, gang.strategy, self.empty) is not None
        return self._cache[gang.shape]


def _reasons(
    no_fit: list[PendingGang],
    behind: list[tuple[PendingGang, PendingGang]],
    capacity: Capacity,
    ever: _EverFits,
) -> dict[str, Waiting]:
    """Reasons against the capacity left after this cycle's admissions (what users see
    next), computed once per shape."""
    by_shape: dict = {}
    waiting: dict[str, Waiting] = {}
    for gang in no_fit:
        if gang.shape not in by_shape:
            if ever.fits(gang):
                by_shape[gang.shape] = (WaitCode.NO_FIT, why_not(gang.bundles, gang.strategy, capacity))
            else:
                reason = why_not(gang.bundles, gang.strategy, ever.empty)
                by_shape[gang.shape] = (
                    WaitCode.UNSCHEDULABLE,
                    f"cannot fit on the cluster as it is now, even empty: {reason}",
                )
        code, message = by_shape[gang.shape]
        waiting[gang.gang_id] = Waiting(gang.gang_id, code, message)
    for gang, blocker in behind:
        if not ever.fits(gang):  # waiting behind anyone would not help it
            reason = why_not(gang.bundles, gang.strategy, ever.empty)
            waiting[gang.gang_id] = Waiting(
                gang.gang_id, WaitCode.UNSCHEDULABLE,
                f"cannot fit on the cluster as it is now, even empty: {reason}",
            )
            continue
        first = waiting[blocker.gang_id].message
        waiting[gang.gang_id] = Waiting(
            gang.gang_id,
            WaitCode.BEHIND,
            f"waiting behind gang {blocker.gang_id} (priority {blocker.priority}, "
            f"earlier in line; backfill is off), which does not fit yet: {first}",
        )
    return waiting
