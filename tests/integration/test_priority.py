"""When capacity frees, the higher-priority pending gang is admitted first."""

from __future__ import annotations

import time

import raygang
from raygang import GangState
from tests.integration.helpers import wait_state


@raygang.gang_task(replicas=2, num_gpus=4, num_cpus=0)
class Fill:
    pass


@raygang.gang_task(replicas=2, num_gpus=4, num_cpus=0)
def whole_cluster():
    return raygang.get_context().gang_id


def _wait_reason(ref, text: str, timeout: float = 10) -> str:
    deadline = time.time() + timeout
    while text not in (ref.status().reason or ""):
        assert time.time() < deadline, ref.status()
        time.sleep(0.05)
    return ref.status().reason


def test_higher_priority_admitted_first_when_capacity_frees(ray_cluster):
    blocker = Fill.options(priority=1000).remote()  # above both: neither may preempt it
    wait_state(blocker, GangState.RUNNING)
    low = whole_cluster.options(name="low", priority="batch").remote()
    high = whole_cluster.options(name="high", priority=500).remote()  # submitted later
    # Backfill is off: `low` waits behind `high`, and says so with the numbers.
    reason = _wait_reason(low, f"waiting behind gang {high.gang_id} (priority 500")
    assert "needs {GPU: 8}" in reason
    assert "free in the cluster is GPU 0" in _wait_reason(high, "needs {GPU: 8}")
    blocker.cancel()
    assert high.result(timeout=60) == [high.gang_id] * 2
    low.result(timeout=60)
    high_status, low_status = high.status(), low.status()
    assert low_status.submitted_at < high_status.submitted_at
    assert high_status.started_at < low_status.started_at
    assert high_status.finished_at <= low_status.started_at
    assert (high_status.priority, low_status.priority) == (500, 10)


def test_backfill_off_holds_back_a_smaller_gang(ray_cluster):
    blocker = Fill.options(replicas=1).remote()  # 4 of 8 GPUs
    wait_state(blocker, GangState.RUNNING)
    big = whole_cluster.options(name="big").remote()  # needs all 8
    small = whole_cluster.options(name="small", replicas=1, num_gpus=1).remote()  # would fit
    reason = _wait_reason(small, f"waiting behind gang {big.gang_id}")
    assert "backfill is off" in reason
    assert small.status().state is GangState.PENDING
    for ref in (small, big, blocker):
        ref.cancel()
