"""The scheduler's cancel keeps cancelling until the gang's task has really ended."""

from __future__ import annotations

import asyncio

from raygang.control.tasks import cancel_and_wait as _cancel


def test_cancel_survives_a_swallowed_cancellation():
    steps = []

    async def stubborn():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            steps.append("swallowed")  # what asyncio.wait_for may do before Python 3.12
        try:
            await asyncio.sleep(3600)
        finally:
            steps.append("torn down")

    async def main():
        task = asyncio.create_task(stubborn())
        await asyncio.sleep(0)
        await asyncio.wait_for(_cancel(task), timeout=10)
        return task

    task = asyncio.run(main())
    assert task.cancelled() and steps == ["swallowed", "torn down"]
