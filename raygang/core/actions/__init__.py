"""The actions a scheduling cycle runs, in the order `PolicyConfig.actions` lists them.

Each is a module with one `Action`: `attempt(cycle, gang) -> bool` tries to admit one
pending gang (on the cycle's scratch capacity; `core.cycle.Cycle` holds it and offers
`place`, `search` for victims and `admit`), and, for actions that stop running gangs,
what their reasons say. Adding an action is a new module here and one line below.
"""

from __future__ import annotations

from raygang.core.actions import allocate, grow, preempt, reclaim, shrink
from raygang.core.actions.action import Action

ACTIONS: dict[str, Action] = {
    action.name: action
    for action in (allocate.ACTION, shrink.ACTION, reclaim.ACTION, preempt.ACTION, grow.ACTION)
}

__all__ = ["ACTIONS", "Action"]
