"""What the clock holds back in a cycle, and the earliest time it lets something through.

Two of the rules an action follows are waits: a pending gang may stop nobody until it has
waited the action's delay (KAI's preemptionDelay), and a running gang may not be stopped
until it has run the action's minimum runtime since its last start (KAI's minruntime
plugin), or its class's. A cycle asks `Clock` both questions, and it remembers the
earliest time an answer it gave turns: until then, the clock alone changes none of the
cycle's decisions, and a later cycle on the same cluster and backlog decides alike
(`Plan.steady_until`; a replay's loop then need not look: `control.loop`). A wait for
the SLA hold (`core.reserve`) is counted by the cycle in the same way.

Rules that move with the clock throughout leave no such time: usage that decays
(`core.usage`), the cost of a wait that a trade weighed and refused (`core.preemption.trade`:
the wait's cost and the stop's loss both grow), and the order of victims by their work
since a checkpoint, where a search in it found no room (`searched`). A cycle in which no
trade refused victims it found is steady as one without trades: a search that found no
room at all finds none later either, by the clock alone.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from raygang.core.actions.action import Action
from raygang.core.config import PolicyConfig
from raygang.core.gang import PendingGang
from raygang.core.snapshot import PlacedGang


class Clock:
    """One cycle's waits: each action's delay and minimum runtime, at `now`."""

    def __init__(self, config: PolicyConfig, actions: Mapping[str, Action], now: float):
        self.config, self.actions, self.now = config, actions, now
        self.steady_until = now if config.usage.enabled else math.inf
        # gang id -> (action, its delay, seconds left), as its reason says
        self.delayed: dict[str, list[tuple[str, float, float]]] = {}

    def changes_at(self, at: float) -> None:
        """Something held back this cycle goes through at `at` by the clock alone."""
        if at < self.steady_until:
            self.steady_until = at

    def delay_left(self, gang: PendingGang, action: str) -> float:
        """Seconds until `gang` has been pending `action`'s delay (0: it has)."""
        delay = self.actions[action].delay_s(self.config.preemption)
        if delay <= 0 or gang.pending_since is None:
            return 0.0
        return max(0.0, gang.pending_since + delay - self.now)

    def delay(self, gang: PendingGang, action: str, left: float) -> None:
        """Remember that `action`'s delay held `gang` back (its reason says so)."""
        self.delayed.setdefault(gang.gang_id, []).append(
            (action, self.actions[action].delay_s(self.config.preemption), left))
        self.changes_at(self.now + left)

    def old_enough(self, gangs: list[PlacedGang], action: str
                   ) -> tuple[list[PlacedGang], list[tuple[PlacedGang, float]]]:
        """(those that ran the action's minimum runtime since their last start, the others
        with when they will have): KAI's reclaimMinRuntime / preemptMinRuntime. One not
        running yet has not started its minimum runtime: its start is a change."""
        least = self.actions[action].min_runtime_s(self.config.preemption)
        if least <= 0:
            return gangs, []
        now, old, young = self.now, [], []
        for gang in gangs:
            since = gang.running_since
            if since is not None and now - since >= least:
                old.append(gang)
            else:
                young.append((gang, (now if since is None else since) + least))
                if since is not None:
                    self.changes_at(since + least)
        return old, young

    def stoppable(self, gangs: list[PlacedGang]) -> list[PlacedGang]:
        """Those of `gangs` that some action may stop: preemptible, not draining, not
        protected by their class's minimum runtime."""
        now, found = self.now, []
        for gang in gangs:
            if not gang.preemptible or gang.draining:
                continue
            if gang.min_runtime_s > 0 and gang.protected(now):  # (no call for the others)
                if gang.running_since is not None:  # else: until its start, a change
                    self.changes_at(gang.running_since + gang.min_runtime_s)
                continue
            found.append(gang)
        return found

    def searched(self, action: Action) -> None:
        """A search for victims in `action`'s order found no room. In the order by work
        since a checkpoint (`cheapest`), which gangs go first, and which a queue keeps
        (`core.preemption.victims.reclaim_protected`), moves with the clock: a search
        later may find room where this one did not."""
        if action.order(self.config.preemption) != "newest":
            self.changes_at(self.now)

    def sla_heads(self, heads: list[PendingGang], sla_s: float) -> None:
        """The queue heads not pending `sla_s` yet reach it (`core.reserve.elect`)."""
        for head in heads:
            if head.pending_since is not None and head.pending_since + sla_s > self.now:
                self.changes_at(head.pending_since + sla_s)
