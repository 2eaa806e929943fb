"""The API's view of the scheduler: the detached actor's methods, awaited without blocking
the server's event loop, with Ray's wrapping of errors taken off.

`create_app` takes any object with these coroutine methods, so a test may give it another
scheduler; the real one is `SchedulerClient`, which finds the actor by name on first use
(and again after the actor is replaced).
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from raygang.runtime.errors import SchedulerNotRunningError
from raygang.runtime.launcher import NAMESPACE
from raygang.runtime.scheduler import SCHEDULER_NAME

PING_TIMEOUT_S = 2.0


class SchedulerUnavailable(RuntimeError):
    """The scheduler actor does not answer (not started, restarting, or gone)."""


class SchedulerClient:
    def __init__(self, handle: Any = None):
        self._handle = handle

    def _actor(self) -> Any:
        if self._handle is None:
            try:
                self._handle = ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
            except ValueError:
                raise SchedulerUnavailable(
                    "no raygang scheduler in this Ray cluster; run `raygang start`"
                ) from None
        return self._handle

    async def call(self, method: str, *args: Any, timeout: float | None = None) -> Any:
        replaced = self._handle is not None
        try:
            return await self._call(method, args, timeout)
        except (RayActorError, SchedulerNotRunningError) as error:
            self._handle = None  # found again: the actor may have been replaced
            if replaced:  # the cached handle was stale; ask the current actor once
                try:
                    return await self._call(method, args, timeout)
                except (RayActorError, SchedulerNotRunningError) as again:
                    self._handle = None
                    error = again
            raise SchedulerUnavailable(f"the raygang scheduler does not answer: {error}") from None

    async def _call(self, method: str, args: tuple, timeout: float | None) -> Any:
        try:
            ref = getattr(self._actor(), method).remote(*args)
            return await asyncio.wait_for(ref, timeout) if timeout else await ref
        except RayTaskError as error:
            if error.cause is not None:
                raise error.cause from None
            raise
        except asyncio.TimeoutError:
            raise SchedulerUnavailable(
                f"the raygang scheduler did not answer {method} within {timeout:g}s"
            ) from None

    def __getattr__(self, method: str):
        if method.startswith("_"):
            raise AttributeError(method)

        async def bound(*args: Any) -> Any:
            return await self.call(method, *args)

        return bound

    async def ping(self) -> dict:
        return await self.call("ping", timeout=PING_TIMEOUT_S)
