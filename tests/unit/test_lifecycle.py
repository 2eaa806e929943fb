"""The gang lifecycle, pure: each event's decision for each relevant state, as a table."""

from __future__ import annotations

import pytest

from raygang.core.gang import GangState as S
from raygang.core.lifecycle import (
    ALLOWED,
    Admitted,
    Adopted,
    CancelledWhilePending,
    Finished,
    FoundAfterRestart,
    Interrupted,
    Life,
    MemberFailed,
    Move,
    Outcome,
    PreemptionSignalled,
    Released,
    Reserved,
    ReservationTimedOut,
    StartLost,
    RestartPolicy,
    check_move,
    decide,
)
from raygang.control.kinds import job

NOW = 1000.0
POLICY = RestartPolicy(base_s=1.0, max_s=60.0)
BY = "preempted by gang infer-1"
FENCED = ("; not before 6s from now (fence_s: its last attempt's members have surely ended "
          "by then)")

CASES = [
    # (id, life, event, outcome)
    ("admitted", Life(S.PENDING), Admitted(2),
     Outcome((Move(S.ADMITTED, "placed on 2 node(s)"),))),
    ("admitted-after-victims", Life(S.PENDING), Admitted(1, waits_for=3),
     Outcome((Move(S.ADMITTED, "placed on 1 node(s); waiting for 3 preempted gang(s) to stop"),))),
    ("reserved", Life(S.ADMITTED), Reserved(),
     Outcome((Move(S.RESERVED, "placement group ready"),
              Move(S.STARTING, "starting members in role order")))),
    ("released", Life(S.STARTING), Released(),
     Outcome((Move(S.RUNNING, "all members ready: released past the launch barrier"),))),
    ("finished", Life(S.RUNNING), Finished(),
     Outcome((Move(S.SUCCEEDED, "all members finished"),))),
    # A Ray job's history speaks of its Ray job, not of members and a launch barrier.
    ("job-reserved", Life(S.ADMITTED, phases=job.KIND.phases), Reserved(),
     Outcome((Move(S.RESERVED, "capacity held on its nodes"),
              Move(S.STARTING, "submitting the Ray job")))),
    ("job-released", Life(S.STARTING, phases=job.KIND.phases), Released(),
     Outcome((Move(S.RUNNING, "the Ray job is running"),))),
    ("job-finished", Life(S.RUNNING, phases=job.KIND.phases), Finished(),
     Outcome((Move(S.SUCCEEDED, "the Ray job succeeded"),))),
    # A body that returns once told it is preempted goes back in line, it did not succeed.
    ("finished-while-preempted", Life(S.RUNNING, stopping=BY), Finished(),
     Outcome((Move(S.PREEMPTED, BY), Move(S.PENDING, BY)), preempted_by=BY)),
    # Ending badly while being preempted is part of the stop, not a failure; a final
    # failure (the library ended the run for good) still fails it.
    ("failed-while-preempted", Life(S.RUNNING, stopping=BY), MemberFailed("job stopped"),
     Outcome((Move(S.PREEMPTED, BY), Move(S.PENDING, BY)), preempted_by=BY)),
    ("failed-for-good-while-preempted", Life(S.RUNNING, stopping=BY),
     MemberFailed("the Ray Train controller died", final=True),
     Outcome((Move(S.FAILED, "the Ray Train controller died"),))),
    ("reservation-timeout", Life(S.ADMITTED), ReservationTimedOut("not ready within 5s"),
     Outcome((Move(S.PENDING, "requeued: not ready within 5s"),))),
    ("failed-no-restarts", Life(S.RUNNING), MemberFailed("member w-0 (rank 0) raised X"),
     Outcome((Move(S.FAILED, "member w-0 (rank 0) raised X"),))),
    ("failed-first-restart", Life(S.RUNNING, max_restarts=2), MemberFailed("w-0 died"),
     Outcome((Move(S.RESTARTING, "restart 1/2 after w-0 died"),
              Move(S.PENDING, "requeued to restart whole, not before 1s from now")),
             restarts=1, not_before=NOW + 1)),
    ("failed-backoff-doubles", Life(S.STARTING, restarts=3, max_restarts=5),
     MemberFailed("w-1 died"),
     Outcome((Move(S.RESTARTING, "restart 4/5 after w-1 died"),
              Move(S.PENDING, "requeued to restart whole, not before 8s from now")),
             restarts=4, not_before=NOW + 8)),
    ("failed-restarts-used-up", Life(S.RUNNING, restarts=2, max_restarts=2),
     MemberFailed("w-0 died"), Outcome((Move(S.FAILED, "w-0 died"),))),
    # The library of a hand-off gang ended its run badly: no restart, whatever is left.
    ("failed-for-good", Life(S.RUNNING, restarts=0, max_restarts=5),
     MemberFailed("the Ray Train controller died", final=True),
     Outcome((Move(S.FAILED, "the Ray Train controller died"),))),
    # A hand-off gang whose library could not place its group where raygang reserved.
    ("hand-off-failed", Life(S.STARTING), ReservationTimedOut("hand-off failed: taken"),
     Outcome((Move(S.PENDING, "requeued: hand-off failed: taken"),))),
    # Its start was lost by the cluster (a GCS outage): back in line, no restart counted,
    # whatever restarts are left (none here).
    ("start-lost", Life(S.STARTING, restarts=0, max_restarts=0), StartLost("lost w-0"),
     Outcome((Move(S.PENDING, "requeued: lost w-0"),))),
    ("preemption-signalled", Life(S.RUNNING), PreemptionSignalled(BY, "priority 1000 > 100", 30),
     Outcome((Move(S.RUNNING, f"{BY}: priority 1000 > 100; grace 30s"),), stopping=BY)),
    ("preempted", Life(S.RUNNING, stopping=BY), Interrupted(),
     Outcome((Move(S.PREEMPTED, BY), Move(S.PENDING, BY)), preempted_by=BY)),
    ("preempted-before-it-ran", Life(S.ADMITTED, stopping=BY), Interrupted(),
     Outcome((Move(S.PREEMPTED, BY), Move(S.PENDING, BY)), preempted_by=BY)),
    # A cancellation wins over a preemption under way.
    ("cancelled-while-preempted", Life(S.RUNNING, stopping=BY, cancel_reason="undeployed"),
     Interrupted(), Outcome((Move(S.CANCELLED, "undeployed"),))),
    ("cancelled-running", Life(S.RUNNING, cancel_reason="cancelled by user"), Interrupted(),
     Outcome((Move(S.CANCELLED, "cancelled by user"),))),
    ("interrupted-without-reason", Life(S.STARTING), Interrupted(),
     Outcome((Move(S.CANCELLED, "cancelled"),))),
    ("cancelled-pending", Life(S.PENDING), CancelledWhilePending("cancelled by user"),
     Outcome((Move(S.CANCELLED, "cancelled by user"),))),
    ("adopted", Life(S.RUNNING), Adopted(),
     Outcome((Move(S.RUNNING, "adopted by the restarted scheduler: members and placement "
                              "group kept"),))),
    ("found-starting", Life(S.STARTING), FoundAfterRestart(),
     Outcome((Move(S.PENDING, "requeued: the scheduler restarted while the gang was "
                              "STARTING"),), requeued_after_restart=True)),
    # A fenced gang (fence_s) starts again no sooner than its fence after any requeue of
    # a started attempt: its old members, cut off or not, have ended themselves by then.
    ("fenced-restart", Life(S.RUNNING, max_restarts=2, fence_s=6), MemberFailed("w-0 died"),
     Outcome((Move(S.RESTARTING, "restart 1/2 after w-0 died"),
              Move(S.PENDING, f"requeued to restart whole{FENCED}")),
             restarts=1, not_before=NOW + 6)),
    ("fenced-restart-backoff-longer", Life(S.RUNNING, restarts=3, max_restarts=5, fence_s=6),
     MemberFailed("w-0 died"),
     Outcome((Move(S.RESTARTING, "restart 4/5 after w-0 died"),
              Move(S.PENDING, "requeued to restart whole, not before 8s from now")),
             restarts=4, not_before=NOW + 8)),
    ("fenced-preempted", Life(S.RUNNING, stopping=BY, fence_s=6), Interrupted(),
     Outcome((Move(S.PREEMPTED, BY), Move(S.PENDING, f"{BY}{FENCED}")), preempted_by=BY,
             not_before=NOW + 6)),
    ("fenced-found-starting", Life(S.STARTING, fence_s=6), FoundAfterRestart(),
     Outcome((Move(S.PENDING, "requeued: the scheduler restarted while the gang was "
                              f"STARTING{FENCED}"),), requeued_after_restart=True,
             not_before=NOW + 6)),
    ("found-with-cancel-intent", Life(S.RUNNING, cancel_reason="cancelled by user"),
     FoundAfterRestart(),
     Outcome((Move(S.PENDING, "scheduler restarted; carrying out the cancellation"),
              Move(S.CANCELLED, "cancelled by user")), requeued_after_restart=True)),
]


@pytest.mark.parametrize("life, event, outcome", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_decisions(life, event, outcome):
    assert decide(life, event, POLICY, NOW) == outcome


@pytest.mark.parametrize("life, event, outcome", [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_every_decided_move_is_allowed(life, event, outcome):
    """Each move is in the table, from where the gang is then (a move to the state it is
    in is an event only; recovery's first move back to PENDING is outside the table)."""
    state = S.PENDING if outcome.requeued_after_restart else life.state
    for move in outcome.moves[1:] if outcome.requeued_after_restart else outcome.moves:
        if move.to is not state:
            check_move("g", state, move.to)
        state = move.to


def test_backoff_is_capped():
    assert [RestartPolicy(2.0, 10.0).delay(n) for n in range(1, 6)] == [2, 4, 8, 10, 10]


def test_the_table():
    assert not ALLOWED.get(S.SUCCEEDED) and not ALLOWED.get(S.FAILED)  # final
    for state in (S.ADMITTED, S.RESERVED, S.STARTING, S.RUNNING):
        assert {S.PREEMPTED, S.RESTARTING, S.FAILED, S.CANCELLED} <= ALLOWED[state]
    with pytest.raises(RuntimeError, match="illegal move SUCCEEDED -> RUNNING"):
        check_move("g", S.SUCCEEDED, S.RUNNING)
    with pytest.raises(RuntimeError, match="illegal move PENDING -> RUNNING"):
        check_move("g", S.PENDING, S.RUNNING)


def test_an_unknown_event_is_a_type_error():
    with pytest.raises(TypeError, match="not a lifecycle event"):
        decide(Life(S.PENDING), object(), POLICY, NOW)
