"""allocate: admit a gang that fits on free capacity now, within its queue's limits."""

from __future__ import annotations

from raygang.core.actions.action import Action, CycleState
from raygang.core.gang import PendingGang


def allocate(cycle: CycleState, gang: PendingGang) -> bool:
    problem = cycle.book.admission_problem(gang)
    if problem:
        cycle.limited[gang.gang_id] = problem
        return False
    key = ("allocate", gang.shape)
    nodes = None if key in cycle.failed else cycle.place(gang)
    if nodes is None:
        cycle.failed.add(key)  # capacity only shrinks during allocate
        return False
    cycle.admit(gang, nodes, "allocate", [])
    return True


ACTION = Action("allocate", allocate)
