"""A preemptor's reservation and the cluster's view of its victims' room (no Ray).

On Ray the GCS shows a removed placement group's resources tens of milliseconds after the
removal, and a placement group asked for before that fails its first try and is placed
only on a later retry of the GCS (up to ~1 s later: bench/preemption.py's 1-GPU figure).
The in-memory cluster's `view_lag_s` shows a removal's room that late, and notes each
reservation asked for before the view showed its room (`asked_early`)."""

from __future__ import annotations

from raygang.core.gang import GangState as S

from tests.control.harness import make_cluster, make_plane, run, submit, wait_for

LAG_S = 0.05  # about what Ray's GCS takes to show a removal here


async def _preempt_one(view_lag_s: float):
    """Two batch gangs fill the node; an inference gang preempts one of them."""
    cluster = make_cluster("n0: GPU=2", view_lag_s=view_lag_s)
    plane = make_plane(cluster)
    batch = [await submit(plane, f"batch-{i}", "GPU=1", seconds=None, priority="batch",
                          preemption_grace_s=0) for i in range(2)]
    for gang_id in batch:
        await wait_for(plane, gang_id, S.RUNNING)
    infer = await submit(plane, "infer", "GPU=1", seconds=None, priority="inference")
    status = await wait_for(plane, infer, S.RUNNING)
    admitted = next(e for e in status.events if e.to_state is S.ADMITTED)
    assert "waiting for 1 preempted gang(s)" in admitted.reason
    preempted = [(await plane.status(g)).preemptions for g in batch]
    assert sorted(preempted) == [0, 1]
    return cluster, plane, infer


def test_a_preemptor_asks_for_its_reservation_once_the_view_shows_its_victims_room():
    async def scenario():
        cluster, plane, infer = await _preempt_one(LAG_S)
        # Not as soon as its victim was torn down: the view did not show the room yet.
        assert cluster.asked_early == []
        await plane.shutdown()

    run(scenario)


def test_a_view_that_lags_longer_than_the_settle_time_delays_the_reservation_no_more():
    async def scenario():
        cluster, plane, infer = await _preempt_one(view_lag_s=30.0)  # settle_s is 0.5
        # It asked without the view after the settle time (as Ray queues it), and runs.
        assert cluster.asked_early == [infer]
        await plane.shutdown()

    run(scenario)
