"""asyncio helpers for work that must not be cut short."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

log = logging.getLogger(__name__)


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


async def cancel_and_wait(task: asyncio.Task) -> None:
    """Cancel a task and wait until it has ended. Cancels again until it ends: a library
    call may swallow one cancellation (asyncio.wait_for before 3.12 does when its inner
    future completes at the same moment)."""
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=1.0)
