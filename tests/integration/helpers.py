from __future__ import annotations

import time

from raygang import GangRef, GangState


def wait_state(ref: GangRef, *states: GangState, timeout: float = 60):
    """Poll until the gang is in one of `states`; returns its status."""
    deadline = time.time() + timeout
    while True:
        status = ref.status()
        if status.state in states:
            return status
        if status.finished or time.time() > deadline:
            raise AssertionError(
                f"{ref.gang_id} is {status.state.value}, wanted {[s.value for s in states]}: "
                f"{status.reason} {status.error}"
            )
        time.sleep(0.05)


def wait_until(what, timeout: float = 60, poll_s: float = 0.05):  # noqa: ANN001, ANN201
    """Poll `what()` until it returns something true; returns that."""
    deadline = time.time() + timeout
    while not (value := what()):
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)
    return value
