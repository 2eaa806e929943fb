"""shrink: a gang that does not fit takes back the surplus that elastic gangs of its own
queue grew into, from those of its priority or below: growth never goes ahead of pending
work that comes first in its queue (`core.elastic`). Only surplus members: the gangs run
on at their minimum or more. Other queues' surplus comes back through reclaim and preempt,
which take surplus before any whole gang."""

from __future__ import annotations

from raygang.core.actions.action import Action, CycleState
from raygang.core.gang import PendingGang
from raygang.core.snapshot import PlacedGang


def shrink(cycle: CycleState, gang: PendingGang) -> bool:
    if not cycle.surplus_queues.get(gang.queue):
        return False  # no surplus in its queue: the common case, nothing to search
    pool = cycle.pool("shrink")  # its victim filter: surplus members only
    # Of its queue, at its priority or below (units are sorted by priority among themselves).
    return cycle.search(gang, pool, pool.candidates(gang.queue, below=gang.priority + 1),
                        "shrink")


def _no_surplus(cycle: CycleState) -> bool:
    """Every gang's try would end at once. A pass in which every try fails looks at the
    gangs the pass before it left undecided, sets aside those that one set aside and
    stops each line where that one stopped: after another pass, skipping it changes
    nothing (tests/unit/test_cycle_shortcuts.py compares)."""
    return not cycle.surplus_queues


def _surplus(cycle: CycleState, gangs: list[PlacedGang]) -> list[PlacedGang]:
    return [g for g in gangs if g.of is not None]


def why(victim: PlacedGang, gang: PendingGang) -> str:
    return (f"for gang {gang.gang_id} (priority {gang.priority}, waiting in queue "
            f"{gang.queue!r}, which the surplus had grown into)")


ACTION = Action("shrink", shrink, no_room={
    "none": "",
    "some": "; the surplus of its queue's elastic gangs would not make room",
}, why=why, verb="shrunk", victim_order="newest", victim_filter=_surplus, idle=_no_surplus)
