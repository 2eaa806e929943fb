"""A gang that declares a short `max_runtime_s` passes a blocked gang of its queue past the
line's lookahead (`PolicyConfig.backfill_max_runtime_s`, `core.cycle.Cycle._pass`)."""

from __future__ import annotations

import pytest

from raygang.core import PolicyConfig, QueueSpec, WaitCode, schedule
from raygang.core.backlog import Backlog
from tests.unit.builders import cluster, gang

HOUR = 3600.0
# Two GPUs free: the 4-GPU head cannot start, every 1-GPU gang behind it could
FREE_2 = ("w-1: GPU=4 free GPU=2",)


def line(*rows: tuple[str, str, float | None], queue: str = "default"):
    """Gangs in submission order: (id, shape, declared max_runtime_s or None)."""
    return [gang(gang_id, shape, seq=i, queue=queue,
                 **({} if runs is None else {"max_runtime_s": runs}))
            for i, (gang_id, shape, runs) in enumerate(rows)]


def admitted(plan) -> list[str]:
    return sorted(a.gang_id for a in plan.admissions)


@pytest.mark.parametrize("lookahead", [0, 1])
def test_past_the_lookahead_only_gangs_declared_short_enough_pass(lookahead):
    pending = line(("head", "4xGPU=1", None), ("blocked-too", "4xGPU=1", None),
                   ("plain", "GPU=1", None), ("long", "GPU=1", 10 * HOUR),
                   ("short", "GPU=1", 0.5 * HOUR), ("short-2", "GPU=1", 4 * HOUR))
    plan = schedule(cluster(*FREE_2), pending, PolicyConfig(backfill_lookahead=lookahead), 0.0)
    assert admitted(plan) == ["short", "short-2"]  # at most 4 h (the default) passes
    for waits in ("plain", "long"):
        assert plan.waiting[waits].code is WaitCode.BEHIND
        assert plan.waiting[waits].behind == "head"
        assert "declare a max_runtime_s of at most 14400 s" in plan.waiting[waits].message


def test_within_the_lookahead_a_declared_gang_is_like_any_other():
    pending = line(("head", "4xGPU=1", None), ("long", "GPU=1", 10 * HOUR),
                   ("plain", "GPU=1", None))
    plan = schedule(cluster(*FREE_2), pending, PolicyConfig(backfill_lookahead=4), 0.0)
    assert admitted(plan) == ["long", "plain"]


def test_with_the_bound_at_0_no_gang_passes_for_what_it_declares():
    pending = line(("head", "4xGPU=1", None), ("short", "GPU=1", 60.0))
    config = PolicyConfig(backfill_lookahead=0, backfill_max_runtime_s=0)
    plan = schedule(cluster(*FREE_2), pending, config, 0.0)
    assert admitted(plan) == []
    assert plan.waiting["short"].code is WaitCode.BEHIND
    assert "declare" not in plan.waiting["short"].message


def test_a_queue_sets_its_own_bound():
    pending = (line(("a-head", "4xGPU=1", None), ("a-short", "GPU=1", 2 * HOUR), queue="a")
               + line(("b-head", "4xGPU=1", None), ("b-short", "GPU=1", 2 * HOUR), queue="b"))
    config = PolicyConfig(backfill_lookahead=0, queues=(
        QueueSpec(name="default"), QueueSpec(name="a", backfill_max_runtime_s=HOUR),
        QueueSpec(name="b")))
    plan = schedule(cluster("w-1: GPU=4 free GPU=2"), pending, config, 0.0)
    assert admitted(plan) == ["b-short"]  # a lets only gangs of at most an hour pass


def test_declared_gangs_pass_until_the_room_is_gone_and_the_rest_wait_behind():
    pending = line(("head", "4xGPU=1", None), *((f"s{i}", "GPU=1", 600.0) for i in range(4)))
    plan = schedule(cluster(*FREE_2), pending, PolicyConfig(backfill_lookahead=0), 0.0)
    assert admitted(plan) == ["s0", "s1"]
    assert plan.waiting["s2"].code is WaitCode.NO_FIT  # tried, no room left


def test_the_backlog_counts_the_declared_gangs_of_each_queue():
    pending = (line(("x", "GPU=1", 60.0), ("y", "GPU=1", None), queue="a")
               + line(("z", "GPU=1", None), queue="b"))
    assert Backlog.of(pending).declared == {"a": 1}


def test_the_declared_runtime_is_validated():
    with pytest.raises(ValueError, match="max_runtime_s"):
        gang("g", "GPU=1", max_runtime_s=0)


def test_a_queue_listing_carries_every_setting_of_its_spec():
    # GET /v1/queues shows what PUT set (tests/e2e/test_api_schema.py checks it on Ray)
    from raygang.control.status import QueueStatus
    from raygang.control.views import queue_statuses
    from raygang.core.snapshot import ClusterSnapshot

    assert set(QueueSpec.model_fields) <= set(QueueStatus.model_fields)
    own = QueueSpec(name="a", backfill_lookahead=0, backfill_max_runtime_s=HOUR)
    policy = PolicyConfig(queues=(QueueSpec(name="default"), own))
    (status,) = [q for q in queue_statuses(ClusterSnapshot((), ()), {}, policy)
                 if q.name == "a"]
    assert {k: getattr(status, k) for k in QueueSpec.model_fields} == own.model_dump()
