"""asyncio helpers for work that must not be cut short."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any

log = logging.getLogger(__name__)

# Starts a task for its owner (a control plane's `TaskSet.spawn`).
Spawn = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


def spawn_free(work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
    """A task owned by no task set (a part used on its own, in a test)."""
    return asyncio.get_running_loop().create_task(work)


async def run_to_completion(work: Awaitable[Any]) -> None:
    """Await `work` to its end even if the caller is cancelled meanwhile (teardown that
    must not be cut short: `cancel_and_wait` re-cancels a gang's task until it ends).
    Errors are logged, never raised."""
    future = asyncio.ensure_future(work)
    while not future.done():
        try:
            await asyncio.shield(future)
        except asyncio.CancelledError:
            continue
        except Exception:  # noqa: BLE001 - cleanup: the gang ends regardless
            log.warning("cleanup step failed", exc_info=True)
            return


async def wait_within(work: Sequence[Awaitable[Any]], timeout: float | None,
                      return_when: str = asyncio.ALL_COMPLETED
                      ) -> tuple[set[asyncio.Future[Any]], set[asyncio.Future[Any]]]:
    """`asyncio.wait` on `work` (done, pending), cancelling what is still pending after.

    Never swallows the caller's cancellation, unlike `asyncio.wait_for` before Python 3.12:
    cancelled in the step where its inner wait ends (an event set just before, as a wake
    always is in a scheduling loop; a placement group becoming ready), wait_for returns
    normally instead of raising (bpo-42130). A loop built on it then runs on for ever when
    cancelled, and so does whoever waits for it (`asyncio.run`'s clean-up, a closing
    control plane)."""
    futures: list[asyncio.Future[Any]] = [asyncio.ensure_future(w) for w in work]
    try:
        done, pending = await asyncio.wait(futures, timeout=timeout, return_when=return_when)
        return done, pending
    finally:
        for future in futures:
            future.cancel()  # no-op on finished ones


async def first_set(events: Sequence[asyncio.Event], timeout: float | None) -> bool:
    """Until one of `events` is set (True) or `timeout` seconds have passed (False)."""
    if any(e.is_set() for e in events):
        return True
    done, _ = await wait_within([e.wait() for e in events], timeout,
                                asyncio.FIRST_COMPLETED)
    return bool(done)


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel a task and wait until it has ended. Cancels again until it ends: a library
    call may swallow one cancellation (asyncio.wait_for before 3.12 does when its inner
    future completes at the same moment)."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=1.0)


class TaskSet:
    """The tasks one control plane started (its loops, gang drivers, resizes, stops):
    kept so that a task nobody else references is not garbage-collected before it ends,
    and so that closing the plane can end every one of them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def spawn(self, work: Coroutine[Any, Any, Any], name: str | None = None
              ) -> asyncio.Task[Any]:
        task = asyncio.get_running_loop().create_task(work, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    async def close(self, timeout_s: float) -> list[asyncio.Task[Any]]:
        """Cancel every task, again each time one cancellation was swallowed or a task
        started another, until none is left or `timeout_s` has passed; the tasks still
        running then (none, unless one ignores cancellation)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while self._tasks and loop.time() < deadline:
            for task in list(self._tasks):
                task.cancel()
            await asyncio.wait(list(self._tasks), timeout=min(0.05, deadline - loop.time()))
        return list(self._tasks)
