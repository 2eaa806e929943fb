"""Looks a replay's loop need not make: a resync interval that ends while nothing changes.

A loop looks on every change and, where nothing changes, once a resync interval has passed
(a policy with rules in time: a delay or a minimum runtime may have ended). On a cluster
that tells every change (a replay: `Cluster.tells_changes`), such a look decides as the
last one did as long as the clock lets nothing through that the last plan held back
(`Plan.steady_until`, `core.clock`) and nothing else happens at the instant the interval
ends: a look there would have taken steps of the event loop, between which whatever else
happens at that instant could be seen. The look skipped is not moved: the next interval
starts at its instant, as it would have, so that every look made is made when it was,
and every decision is the same (`bench/sim_speed.py --check`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from raygang.core.plan import Plan

ROUNDING_S = 1e-6  # a plan's times are sums: an interval ending this near one looks


class Ticks:
    """The intervals of one loop. `quiet(n)`: whether nothing happens at this instant but
    `n` callbacks due now (`control.virtual.VirtualTimeLoop.quiet`)."""

    def __init__(self, quiet: Callable[[int], bool]):
        self._quiet = quiet
        self._quiet_end = False  # the last interval ended at an instant of nothing else

    def start(self, seconds: float) -> asyncio.TimerHandle:
        """A timer for the end of an interval the loop waits, set before the wait's own
        (so that at that instant it runs first and sees the other's due too)."""
        self._quiet_end = False
        return asyncio.get_running_loop().call_later(seconds, self._ended)

    def _ended(self) -> None:
        self._quiet_end = self._quiet(1)  # besides the wait's own timeout

    def steady(self, plan: Plan, now: float) -> bool:
        """Whether the interval that just ended (nothing told) needs no look."""
        until = plan.steady_until
        return self._quiet_end and until is not None and now < until - ROUNDING_S


@dataclass(frozen=True)
class Replaying:
    """How a replay's loop (`raygang sim`) differs from the product's, given when its
    control plane is built: `ticks`, the resync intervals a look may skip; `settle`, what
    a woken loop waits for before it looks (`VirtualTimeLoop.settled`: one cycle per
    instant), or None. Its cycles write no reasons on records: nobody reads a replay's
    (`SchedulingLoop.explains`)."""

    ticks: Ticks
    settle: Callable[[], Awaitable[None]] | None = None
