"""The scheduling loop wakes on a submission and on a gang's end, not only on its timer.

The scheduler is restarted with a resync interval far longer than the test waits, so a
loop that woke only on its timer would leave both gangs PENDING for ~30 s.
"""

from __future__ import annotations

import time

import pytest
import ray

import raygang
from raygang import GangState
from tests.conftest import SCHEDULER_CONFIG
from tests.integration.helpers import wait_state

RESYNC_S = 30.0
PROMPT_S = 10.0  # "well under the resync interval": members' start-up (~1-2 s here) and slack


@pytest.fixture
def slow_timer_scheduler(ray_cluster):
    config = raygang.SchedulerConfig.model_validate(
        {**SCHEDULER_CONFIG.model_dump(), "resync_interval_s": RESYNC_S}
    )
    raygang.shutdown()
    handle = raygang.start(config)
    assert ray.get(handle.ping.remote())["config"]["resync_interval_s"] == RESYNC_S
    time.sleep(0.5)  # past the cycle the start itself triggers (recovery wakes the loop)
    yield
    raygang.shutdown()
    raygang.start(SCHEDULER_CONFIG)


@ray.remote(num_cpus=0)
class Gate:
    def __init__(self):
        self.is_open = False

    def open(self):
        self.is_open = True

    def opened(self):
        return self.is_open


# All 8 GPUs: while it runs, nothing else that needs a GPU fits.
@raygang.gang_task(replicas=2, num_gpus=4, num_cpus=0)
def hold_all_gpus(gate):
    while not ray.get(gate.opened.remote()):
        time.sleep(0.02)
    return time.time()


@raygang.gang_task(num_gpus=1, num_cpus=0)
def one_gpu():
    return time.time()


def _event_at(status, state: GangState) -> float:
    return next(e.at for e in status.events if e.to_state is state)


def test_submission_and_gang_end_wake_the_loop(slow_timer_scheduler):
    gate = Gate.remote()
    first = second = None
    try:
        first = hold_all_gpus.remote(gate)
        running = wait_state(first, GangState.RUNNING, timeout=PROMPT_S)
        assert _event_at(running, GangState.ADMITTED) - running.submitted_at < 1.0, running.events

        second = one_gpu.remote()
        time.sleep(0.5)  # a cycle has looked at it (woken by the submission): it waits
        blocked = second.status()
        assert blocked.state is GangState.PENDING and "GPU" in (blocked.reason or ""), blocked

        ray.get(gate.open.remote())
        done = first.wait(timeout=RESYNC_S)
        assert done.state is GangState.SUCCEEDED, done
        try:
            admitted = wait_state(second, GangState.RUNNING, GangState.SUCCEEDED,
                                  timeout=PROMPT_S)
        except AssertionError as error:  # e.g. "free in the cluster is GPU 0" while 8 are
            gpus = ray.available_resources().get("GPU", 0)
            raise AssertionError(f"{error}; Ray shows {gpus:g} GPUs free now") from None
        # Admitted right after the first gang ended, not on the next timer tick.
        waited = _event_at(admitted, GangState.ADMITTED) - done.finished_at
        assert 0 <= waited < 1.0, (waited, admitted.events)
        assert second.result(timeout=RESYNC_S)
    finally:
        ray.get(gate.open.remote())
        for ref in (first, second):
            if ref is not None:
                ref.cancel()
        ray.kill(gate)
