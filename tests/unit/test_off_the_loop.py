"""`steps.off_the_loop`, the way a launch makes its GCS calls (a placement group, named
member actors) without holding the scheduler's event loop, with the call replaced by a
blocking function (no Ray): nothing it makes is left behind by a caller that stops
waiting, whether cancelled or timed out."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from raygang.runtime.kinds.gang.steps import off_the_loop


class Call:
    """A GCS call that blocks until released (as during a GCS outage), then makes a thing."""

    def __init__(self, fails: bool = False) -> None:
        self.release = threading.Event()
        self.made: list[str] = []
        self.undone: list[str] = []
        self.fails = fails

    def make(self) -> str:
        assert self.release.wait(10)
        if self.fails:
            raise RuntimeError("the GCS refused it")
        self.made.append("group")
        return "group"

    def undo(self) -> None:
        self.undone.extend(self.made)


def test_the_loop_runs_on_while_the_call_blocks_and_its_result_comes_back():
    async def scenario():
        call = Call()
        work = asyncio.ensure_future(off_the_loop(call.make, call.undo, timeout=5))
        ticks = 0
        for _ in range(10):  # the loop is free: other coroutines run meanwhile
            await asyncio.sleep(0.01)
            ticks += 1
        assert ticks == 10 and not work.done()
        call.release.set()
        assert await work == "group" and call.undone == []

    asyncio.run(scenario())


def test_a_caller_cancelled_meanwhile_waits_for_the_call_then_undoes_what_it_made():
    async def scenario():
        call = Call()
        work = asyncio.ensure_future(off_the_loop(call.make, call.undo, timeout=5))
        await asyncio.sleep(0.05)
        work.cancel()
        await asyncio.sleep(0.05)
        assert not work.done()  # held: the group is being made, and must not be lost
        work.cancel()  # a second cancellation (cancel_and_wait repeats them) is held too
        call.release.set()
        with pytest.raises(asyncio.CancelledError):
            await work
        assert call.made == ["group"] and call.undone == ["group"]  # undone before it ended

    asyncio.run(scenario())


def test_a_call_that_fails_while_its_caller_is_cancelled_undoes_nothing():
    async def scenario():
        call = Call(fails=True)
        work = asyncio.ensure_future(off_the_loop(call.make, call.undo, timeout=5))
        await asyncio.sleep(0.05)
        work.cancel()
        call.release.set()
        with pytest.raises(asyncio.CancelledError):
            await work
        assert call.made == [] and call.undone == []

    asyncio.run(scenario())


def test_past_its_timeout_the_caller_goes_on_and_what_is_made_later_is_undone():
    async def scenario():
        call = Call()
        started = time.monotonic()
        with pytest.raises(TimeoutError, match="no answer from the GCS within 0.2s"):
            await off_the_loop(call.make, call.undo, timeout=0.2)
        assert time.monotonic() - started < 1.0  # not held until the call returns
        call.release.set()  # the GCS answers at last: the group is made, then removed
        deadline = time.monotonic() + 5
        while call.undone != ["group"]:
            assert time.monotonic() < deadline, (call.made, call.undone)
            await asyncio.sleep(0.01)

    asyncio.run(scenario())
