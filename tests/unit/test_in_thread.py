"""`control.tasks.in_thread`: a blocking call (a placement group's or named actor's
creation, which waits for the GCS for as long as it is down) runs off the event loop, and
a caller cancelled meanwhile ends only once the call has returned and recorded what it made."""

from __future__ import annotations

import asyncio
import threading

import pytest

from raygang.control.tasks import in_thread


def test_the_call_runs_off_the_loop_which_keeps_answering():
    release = threading.Event()
    ticks = []

    async def scenario():
        async def tick():
            while not release.is_set():
                ticks.append(1)
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        loop_thread = threading.get_ident()
        call_thread = await in_thread(
            lambda: (release.wait(0.3), threading.get_ident())[1])
        release.set()
        await ticker
        return loop_thread, call_thread

    loop_thread, call_thread = asyncio.run(scenario())
    assert call_thread != loop_thread
    assert len(ticks) >= 5  # the loop ran while the call blocked


def test_a_caller_cancelled_mid_call_ends_after_the_call_with_its_product_recorded():
    started, release = threading.Event(), threading.Event()
    made: dict[str, str] = {}

    def create() -> None:
        started.set()
        release.wait(5)
        made["pg"] = "raygang-g1"  # what teardown must find

    async def scenario():
        task = asyncio.create_task(in_thread(create))
        while not started.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.sleep(0.05)
        task.cancel()  # cancelled again (cancel_and_wait does): still waits for the call
        await asyncio.sleep(0.05)
        assert not task.done() and not made
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return task

    task = asyncio.run(scenario())
    assert task.cancelled() and made == {"pg": "raygang-g1"}


def test_an_error_of_the_call_is_the_callers_unless_it_was_cancelled_first():
    def fail() -> None:
        raise ValueError("name taken")

    async def plain():
        with pytest.raises(ValueError, match="name taken"):
            await in_thread(fail)

    asyncio.run(plain())

    started, release = threading.Event(), threading.Event()

    def fail_late() -> None:
        started.set()
        release.wait(5)
        raise ValueError("late")

    async def cancelled_first():
        task = asyncio.create_task(in_thread(fail_late))
        while not started.is_set():
            await asyncio.sleep(0.005)
        task.cancel()
        await asyncio.sleep(0.02)
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancelled_first())
