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
    # Neither fits: `low` is tried past `high` (the line goes on past a blocked gang) and
    # says why with the numbers, as `high` does.
    assert "free in the cluster is GPU 0" in _wait_reason(low, "needs {GPU: 8}")
    assert "free in the cluster is GPU 0" in _wait_reason(high, "needs {GPU: 8}")
    blocker.cancel()
    assert high.result(timeout=60) == [high.gang_id] * 2
    low.result(timeout=60)
    high_status, low_status = high.status(), low.status()
    assert low_status.submitted_at < high_status.submitted_at
    assert high_status.started_at < low_status.started_at
    assert high_status.finished_at <= low_status.started_at
    assert (high_status.priority, low_status.priority) == (500, 10)


def test_a_smaller_gang_goes_past_every_blocked_one_of_its_line(ray_cluster):
    """The default line is best-effort (`backfill_lookahead` null, Kueue's BestEffortFIFO):
    a gang that fits starts past every blocked gang of its queue, however many; the
    blocked ones of one kind wait as the first of them does. (A bounded line, where the
    rest waits behind the first, is tested without Ray: tests/unit/test_schedule.py.)"""
    blocker = Fill.options(replicas=1).remote()  # 4 of 8 GPUs
    refs = [blocker]
    try:
        wait_state(blocker, GangState.RUNNING)
        big = whole_cluster.options(name="big").remote()  # needs all 8
        small = whole_cluster.options(name="small", replicas=1, num_gpus=1).remote()  # fits
        refs += [big, small]
        assert small.result(timeout=60) == [small.gang_id]
        assert big.status().state is GangState.PENDING
        assert "needs {GPU: 8}" in _wait_reason(big, "free in the cluster is GPU 4")
        more = [whole_cluster.options(name=f"big-{i}").remote() for i in range(5)]
        late = whole_cluster.options(name="late", replicas=1, num_gpus=1).remote()
        refs += [*more, late]
        assert late.result(timeout=60) == [late.gang_id]  # past all six
        assert f"waiting as gang {big.gang_id} does" in \
            _wait_reason(more[-1], f"waiting as gang {big.gang_id} does")
        assert all(m.status().state is GangState.PENDING for m in more)
    finally:
        for ref in reversed(refs):
            ref.cancel()
