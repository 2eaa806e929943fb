"""Virtual time: an asyncio event loop whose clock jumps to the next timer when idle.

The control plane is asyncio code that waits on timers (`asyncio.sleep`, `wait_for`,
`call_later`) and on futures other tasks resolve. Run it on this loop and every wait is
a wait in virtual time: when nothing is ready to run, instead of blocking in the
selector until the next timer is due, the loop moves its clock to that timer and goes
on, so it fires at once. A week of cluster time then costs what its callbacks cost, and
a test scenario of seconds costs milliseconds. One thread, timers ordered by time and
then by the order they were set: the same program runs the same way every time.

Used by the Ray-free test tier (tests/control, on `control.memory.MemoryCluster`) and by
`raygang sim` (the same cluster, replaying a trace).

Nothing may run in a real thread meanwhile (the loop would move time on while it works):
`run_in_executor` / `asyncio.to_thread` run their function inline (`run_in_executor`).
The real selector is still polled (without blocking), because `call_soon_threadsafe`
wakes the loop through its self-pipe.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import selectors
import threading
import time
from collections.abc import Callable
from typing import Any


class SimulationStalled(RuntimeError):
    """Nothing is ready and no timer is set: the simulated world would wait for ever."""


class WallClockExceeded(RuntimeError):
    """The loop has run longer in real time than it was allowed (a livelock: tasks that
    keep each other busy without time moving on)."""


class VirtualClock:
    """Seconds since the start of the simulation; moved only by the event loop."""

    def __init__(self, start: float = 0.0):
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    def jump_to(self, when: float) -> None:
        """On to `when` exactly (never back): a timer due then compares equal to it."""
        self.now = max(self.now, when)


class _JumpingSelector(selectors.DefaultSelector):
    """A selector that never blocks: a select that would wait moves the clock instead, to
    the loop's next timer."""

    def __init__(self, clock: VirtualClock):
        super().__init__()
        self._clock = clock
        self.next_timer: Callable[[], float | None] = lambda: None
        self.wall_limit_s: float | None = None
        self._wall_start = time.monotonic()
        # Whether a poll of the real selector could find anything: another thread wrote
        # to the loop's self-pipe, or something besides that pipe is registered (`must_poll`).
        self.poll_due = False
        self.must_poll: Callable[[], bool] = lambda: True
        # Wakes the loop's `settled` waiters, if any (True): nothing is ready, no timer due
        self.settled: Callable[[], bool] = lambda: False

    def select(self, timeout: float | None = None
               ) -> list[tuple[selectors.SelectorKey, int]]:
        if self.wall_limit_s is not None \
                and time.monotonic() - self._wall_start > self.wall_limit_s:
            raise WallClockExceeded(
                f"ran for more than {self.wall_limit_s:g}s of real time (virtual time "
                f"{self._clock.now:.3f}s): tasks keep each other busy")
        ready: list[tuple[selectors.SelectorKey, int]] = []
        if self.poll_due or self.must_poll():  # else a poll finds nothing: a syscall saved
            self.poll_due = False  # per callback round, as a replay makes hundreds of thousands
            ready = super().select(0)
        if ready or timeout == 0:
            return ready
        if self.settled():  # the instant is over: its waiters run before the clock moves
            return []
        if timeout is None:
            raise SimulationStalled(
                "no task can make progress and no timer is set (a gang waits for an event "
                "that nothing will ever send)")
        when = self.next_timer()
        # The timer's own time, not now + timeout: adding would round, and a timer meant
        # for `when` could find the clock a hair before it.
        if when is None:
            self._clock.advance(timeout)
        else:
            self._clock.jump_to(when)
        return []


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(result)
    else:
        future.set_exception(error)


class _Timer(asyncio.TimerHandle):
    """A timer ordered by its time, then by when it was set: asyncio orders timers by time
    alone, and its heap breaks ties by its own layout, which every other timer set or
    cancelled moves (so a timer added or taken away anywhere reordered simultaneous ones
    elsewhere, and with them a replay's decisions)."""

    __slots__ = ("_order",)

    def __init__(self, when: float, callback: Callable[..., object], args: tuple[Any, ...],
                 loop: asyncio.AbstractEventLoop, context: Any, order: int):
        super().__init__(when, callback, args, loop, context)
        self._order = order

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, _Timer):
            return NotImplemented
        mine, theirs = self._when, other._when  # type: ignore[attr-defined]
        return bool(mine < theirs) if mine != theirs else self._order < other._order


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop on a `VirtualClock` (see the module's docstring). `wall_limit_s`:
    raise `WallClockExceeded` once it has run that long in real time."""

    # How far ahead of `time()` a timer counts as due now. asyncio's `_run_once` runs every
    # timer less than its clock resolution ahead, which it takes from the monotonic clock
    # whatever clock `time()` reads (1 ns on Linux); `_wake_settled` must count the same
    # timers as due, or it would wake `settled`'s waiters in the round that runs one.
    CLOCK_RESOLUTION_S = time.get_clock_info("monotonic").resolution

    def __init__(self, clock: VirtualClock | None = None, wall_limit_s: float | None = None):
        self.clock = clock or VirtualClock()
        selector = _JumpingSelector(self.clock)
        super().__init__(selector)
        selector.next_timer = self._next_timer
        selector.wall_limit_s = wall_limit_s
        selector.must_poll = self._must_poll
        selector.settled = self._wake_settled
        self._settling: list[asyncio.Future[None]] = []
        self._timer_order = itertools.count()  # simultaneous timers fire in this order
        self._jumping = selector

    def time(self) -> float:
        return self.clock.now

    def run_in_executor(self, executor: Any, func: Callable[..., Any],  # type: ignore[override]
                        *args: Any) -> asyncio.Future[Any]:
        """An executor's call (`asyncio.to_thread`: a cycle's decision) runs at once,
        inline, whatever the executor: no thread may work while the clock stands. Its
        future is done one round later, as a thread's would be (asyncio chains a thread's
        future to the loop's with one callback): the rounds between a call and its
        caller's wake-up are the same, so are the steps other tasks take in between, and
        so are a replay's decisions. Without a thread's future and its lock (a replay
        makes tens of thousands of these calls)."""
        future = self.create_future()
        try:
            result = func(*args)
        except BaseException as error:  # handed to the awaiting task, as a thread would
            self.call_soon(_settle, future, None, error)
        else:
            self.call_soon(_settle, future, result, None)
        return future

    def call_at(self, when: float, callback: Callable[..., object], *args: Any,  # type: ignore[override]
                context: Any = None) -> asyncio.TimerHandle:
        """asyncio's `call_at`, with a timer that keeps simultaneous timers in the order
        they were set (`_Timer`)."""
        if when is None:
            raise TypeError("when cannot be None")
        self._check_closed()  # type: ignore[attr-defined]
        if self.get_debug():
            self._check_thread()  # type: ignore[attr-defined]
        timer = _Timer(when, callback, args, self, context, next(self._timer_order))
        heapq.heappush(self._scheduled, timer)  # type: ignore[attr-defined]
        timer._scheduled = True  # type: ignore[attr-defined]
        return timer

    # The self-pipe: written to wake a loop blocked in its selector. This one never blocks,
    # so a callback scheduled from its own thread needs no wake: no byte is written (and
    # none read back by a callback that does nothing else); one from another thread still
    # writes, and the next round polls for it. Signal handlers write to the pipe too.
    def _write_to_self(self) -> None:
        if threading.get_ident() != self._thread_id:  # type: ignore[attr-defined]
            self._jumping.poll_due = True
            super()._write_to_self()  # type: ignore[misc]

    def _must_poll(self) -> bool:
        return len(self._jumping.get_map()) > 1 or bool(getattr(self, "_signal_handlers", None))

    async def settled(self) -> None:
        """Until everything of this instant has run: no callback ready, no timer due, and
        the clock about to move on. Events of one virtual instant are simultaneous; who
        waits for this sees them all, not only those the one thread happened to run first
        (`SimSettings.one_cycle_per_instant`: one scheduling cycle after a cascade of
        admissions, starts and ends at one instant, not one per step of it)."""
        waiter = self.create_future()
        self._settling.append(waiter)
        await waiter

    def quiet(self, besides: int = 0) -> bool:
        """Whether nothing happens at this instant after the callback that asks, but
        `besides` callbacks it knows of: no more ready, no timer due (a cancelled one
        counts: it may not be). Asked by a timer, it sees what else is due at its time
        and what ran before it there (that scheduled callbacks of its own):
        `control.ticks`."""
        when = self._next_timer()
        return len(self._ready) <= besides and (  # type: ignore[attr-defined]
            when is None or when >= self.time() + self.CLOCK_RESOLUTION_S)

    def _wake_settled(self) -> bool:
        when = self._next_timer()  # (a timer within the clock's resolution is due now)
        if not self._settling or (
                when is not None and when < self.time() + self.CLOCK_RESOLUTION_S):
            return False
        waiters, self._settling = self._settling, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)
        return True

    def _next_timer(self) -> float | None:
        # asyncio's heap of timer handles (cancelled included)
        scheduled = self._scheduled  # type: ignore[attr-defined]
        return scheduled[0].when() if scheduled else None
