"""Requests for the next cycle's dump (`core.cycle_dump`), and their answers.

A cycle pays for a dump only when one is asked for: the request wakes the loop, and the
cycle runs even with nothing pending (its dump then shows an empty backlog). A cycle that
fails is dumped too, with its error and no plan. A dump that cannot be written is not a
cycle that failed: its requests get the error, and the loop goes on.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from raygang.control.tasks import wait_within
from raygang.core.backlog import Backlog
from raygang.core.config import PolicyConfig
from raygang.core.cycle_dump import dump_cycle
from raygang.core.plan import Plan
from raygang.core.plan_data import plan_data
from raygang.core.snapshot import ClusterSnapshot

log = logging.getLogger(__name__)

Prepared = tuple[float, ClusterSnapshot, Backlog, PolicyConfig]  # a cycle's inputs: now first
T = TypeVar("T")


class CycleDumps:
    """One loop's requests. `wake`: the loop's; `last_error`: its last cycle's error."""

    def __init__(self, wake: Callable[[], None], last_error: Callable[[], str | None]):
        self.requests: list[asyncio.Future[dict[str, Any]]] = []
        self._wake, self._last_error = wake, last_error

    def __bool__(self) -> bool:
        return bool(self.requests)

    async def next(self, timeout_s: float) -> dict[str, Any]:
        """The next cycle's inputs and plan."""
        answer: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.requests.append(answer)
        self._wake()
        try:
            # wait_within, not wait_for (which can swallow this call's cancellation:
            # control/tasks.py); the shield keeps the answer for the other requests.
            done, _ = await wait_within([asyncio.shield(answer)], timeout_s)
            if not done:
                error = self._last_error()
                raise TimeoutError(f"no scheduling cycle ran within {timeout_s:g} s"
                                   + (f" (last error: {error})" if error else ""))
            return answer.result()
        finally:
            if answer in self.requests:
                self.requests.remove(answer)

    def answer(self, prepared: Prepared, plan: Plan | None = None,
               error: Exception | None = None) -> None:
        """Answer the requests for this cycle's dump, if any, writing it in this thread."""
        if self.requests:
            self._answer(_written(lambda: _writer(prepared, plan, error)()))

    async def answer_off_loop(self, prepared: Prepared, plan: Plan | None = None,
                              error: Exception | None = None) -> None:
        """The same, the inputs written out in a thread of their own (a large backlog
        takes a while); the plan's unread reasons are read here, on the loop's thread."""
        if self.requests:
            write = _written(lambda: _writer(prepared, plan, error))
            self._answer(write if isinstance(write, Exception)
                         else await asyncio.to_thread(_written, write))

    def _answer(self, outcome: dict[str, Any] | Exception) -> None:
        """Every request waiting gets the dump, or why it could not be written."""
        if isinstance(outcome, Exception):
            log.error("writing a cycle's dump failed: %r", outcome)
        answers, self.requests = self.requests, []
        for answer in answers:
            if answer.done():
                continue
            if isinstance(outcome, Exception):
                answer.set_exception(outcome)
            else:
                answer.set_result(outcome)


def _writer(prepared: Prepared, plan: Plan | None = None,
            error: Exception | None = None) -> Callable[[], dict[str, Any]]:
    """What writes this cycle's dump. The plan's reasons not read yet are read now, as a
    status reads them; the inputs (copies) may be written out in another thread."""
    now, snapshot, backlog, policy = prepared
    data = None if plan is None else plan_data(plan)
    why = None if error is None else f"{type(error).__name__}: {error}"
    return functools.partial(dump_cycle, snapshot, backlog, policy, now, data, error=why)


def _written(write: Callable[[], T]) -> T | Exception:
    """What `write()` returns, or the exception it raised (for a dump's requests)."""
    try:
        return write()
    except Exception as failed:  # noqa: BLE001 - handed to the requests, not raised here
        return failed
