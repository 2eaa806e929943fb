"""Virtual time: an asyncio event loop whose clock jumps to the next timer when idle.

The control plane is asyncio code that waits on timers (`asyncio.sleep`, `wait_for`,
`call_later`) and on futures other tasks resolve. Run it on this loop and every wait is
a wait in simulated time: when nothing is ready to run, instead of blocking in the
selector for `timeout` seconds the loop adds `timeout` to its clock and goes on, so the
next timer fires at once. A week of cluster time then costs what its callbacks cost.

Nothing may run in a real thread meanwhile (the loop would move time on while it works):
`run_in_executor` / `asyncio.to_thread` run their function inline (`InlineExecutor`).
The real selector is still polled (without blocking), because `call_soon_threadsafe`
wakes the loop through its self-pipe.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import selectors
from collections.abc import Callable
from typing import Any


class SimulationStalled(RuntimeError):
    """Nothing is ready and no timer is set: the simulated world would wait for ever."""


class VirtualClock:
    """Seconds since the start of the simulation; moved only by the event loop."""

    def __init__(self, start: float = 0.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that never blocks: a select that would wait moves the clock instead."""

    def __init__(self, clock: VirtualClock):
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list:
        ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if timeout is None:
            raise SimulationStalled(
                "no task can make progress and no timer is set (a gang waits for an event "
                "that nothing will ever send)")
        self._clock.advance(timeout)
        return []


class InlineExecutor(concurrent.futures.ThreadPoolExecutor):
    """`run_in_executor` without threads: the function runs at once, in the caller."""

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
               ) -> concurrent.futures.Future:
        future: concurrent.futures.Future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as error:  # handed to the awaiting task, as a thread would
            future.set_exception(error)
        return future


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on a `VirtualClock` (see the module's docstring)."""

    def __init__(self, clock: VirtualClock | None = None):
        self.clock = clock or VirtualClock()
        super().__init__(_JumpingSelector(self.clock))
        self.set_default_executor(InlineExecutor(max_workers=1))

    def time(self) -> float:
        return self.clock.now
