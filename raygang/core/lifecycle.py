"""A gang's life as data: which moves exist, and what each event leads to.

    PENDING -> ADMITTED -> RESERVED -> STARTING -> RUNNING -> SUCCEEDED
       ^          |  (any of these, on an event below)  |  \\-> FAILED / CANCELLED
       '--- PREEMPTED / RESTARTING <--------------------'

`decide(life, event, policy, now)` is pure: given what the runtime knows of one gang
(`Life`) and what happened (an event), it returns the `Outcome`: the moves to make, in
order, each with its reason, and what the runtime must do about time (a restart waits
until `not_before`; the loop must look again then). Tearing down is not in the outcome:
every event that ends a run ends in the runtime releasing what the gang held, whatever
the decision. A lost node is seen as its members dying: a `MemberFailed`.

Moves outside `ALLOWED` are bugs of the runtime; `check_move` says so loudly. A gang a
restarted scheduler finds mid-way (`FoundAfterRestart`) goes back to PENDING by a move no
running scheduler makes, so it is not in the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from raygang.core.gang import GangState

S = GangState
_HOLDING_TO = {S.RESTARTING, S.FAILED, S.CANCELLED, S.PREEMPTED}
ALLOWED: Mapping[GangState, frozenset[GangState]] = {
    S.PENDING: frozenset({S.ADMITTED, S.CANCELLED}),
    S.ADMITTED: frozenset({S.RESERVED, S.PENDING} | _HOLDING_TO),
    S.RESERVED: frozenset({S.STARTING} | _HOLDING_TO),
    # STARTING -> PENDING: a hand-off gang whose library could not place its own group
    # where raygang reserved (work outside raygang took the nodes) requeues.
    S.STARTING: frozenset({S.RUNNING, S.PENDING} | _HOLDING_TO),
    S.RUNNING: frozenset({S.SUCCEEDED} | _HOLDING_TO),
    S.RESTARTING: frozenset({S.PENDING, S.CANCELLED}),
    S.PREEMPTED: frozenset({S.PENDING, S.CANCELLED}),
}


def check_move(gang_id: str, frm: GangState, to: GangState) -> None:
    """Raise if `frm -> to` is not a move a gang may make (a bug in the scheduler)."""
    if to not in ALLOWED.get(frm, frozenset()):
        raise RuntimeError(f"gang {gang_id}: illegal move {frm.value} -> {to.value}")


@dataclass(frozen=True, slots=True)
class RestartPolicy:
    """Whole-gang restarts back off exponentially: `base_s`, doubling, at most `max_s`."""

    base_s: float = 1.0
    max_s: float = 60.0

    def delay(self, restart: int) -> float:
        """Seconds before the `restart`-th restart (1-based) may run."""
        return min(self.max_s, self.base_s * 2.0 ** (restart - 1))


@dataclass(frozen=True, slots=True)
class Phases:
    """How a kind of run says its steps in a gang's history: a job's reason should
    speak of its Ray job, not of members and a launch barrier it does not have (each
    kind's words: `control.kinds`)."""

    reserved: str
    starting: str
    running: str
    finished: str


GANG_PHASES = Phases("placement group ready", "starting members in role order",
                     "all members ready: released past the launch barrier",
                     "all members finished")


@dataclass(frozen=True, slots=True)
class Life:
    """What the decisions read of one gang."""

    state: GangState
    restarts: int = 0
    max_restarts: int = 0
    stopping: str | None = None  # being preempted: "preempted by gang x" (how it requeues)
    cancel_reason: str | None = None  # a cancellation was asked for (it wins)
    phases: Phases = GANG_PHASES  # what its run is: the words its history uses
    fence_s: float | None = None  # its members end within this when cut off (GangSpec)


# Events ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Admitted:
    nodes: int  # distinct nodes its bundles are pinned to
    waits_for: int = 0  # gangs being stopped it must wait for


@dataclass(frozen=True, slots=True)
class Reserved:
    """Its placement group is ready; its members are being started in role order."""


@dataclass(frozen=True, slots=True)
class Released:
    """Every member is ready: released past the launch barrier."""


@dataclass(frozen=True, slots=True)
class Finished:
    """Every member's body returned."""


@dataclass(frozen=True, slots=True)
class ReservationTimedOut:
    message: str


@dataclass(frozen=True, slots=True)
class StartLost:
    """Its start was given up: the cluster lost part of it (Ray, a member's creation in a
    GCS outage). Not the gang's failure: it goes back in line, with no restart counted."""
    message: str


@dataclass(frozen=True, slots=True)
class MemberFailed:
    summary: str  # which member, and what it raised ("member w-0 (rank 0) raised ...")
    final: bool = False  # no restart whatever is left (e.g. the library's run ended badly)


@dataclass(frozen=True, slots=True)
class PreemptionSignalled:
    stopping: str  # "preempted by gang x" / "reclaimed by deployment y"
    why: str  # the plan's reason
    grace_s: float


@dataclass(frozen=True, slots=True)
class Interrupted:
    """Its run was stopped (preempted, cancelled, or the scheduler shut down)."""


@dataclass(frozen=True, slots=True)
class CancelledWhilePending:
    reason: str


@dataclass(frozen=True, slots=True)
class Adopted:
    """A restarted scheduler found it running whole and took over its run."""


@dataclass(frozen=True, slots=True)
class FoundAfterRestart:
    """A restarted scheduler found it neither pending, finished nor adoptable."""


Event = (Admitted | Reserved | Released | Finished | ReservationTimedOut | StartLost
         | MemberFailed | PreemptionSignalled | Interrupted | CancelledWhilePending | Adopted
         | FoundAfterRestart)


@dataclass(frozen=True, slots=True)
class Move:
    to: GangState
    reason: str


@dataclass(frozen=True, slots=True)
class Outcome:
    moves: tuple[Move, ...] = ()  # in order; a move to the same state is an event only
    restarts: int | None = None  # its restart count from now on (None: unchanged)
    not_before: float | None = None  # it may not be admitted before this time
    preempted_by: str | None = None  # said in its reason until it runs again
    stopping: str | None = None  # it is now being preempted, and requeues saying so
    requeued_after_restart: bool = False  # back to PENDING outside the table (recovery)


def decide(life: Life, event: Event, policy: RestartPolicy, now: float) -> Outcome:
    """What `event` leads to for a gang in `life`."""
    match event:
        case Admitted(nodes, waits):
            note = f"; waiting for {waits} preempted gang(s) to stop" if waits else ""
            return _to(S.ADMITTED, f"placed on {nodes} node(s){note}")
        case Reserved():
            words = life.phases
            return Outcome((Move(S.RESERVED, words.reserved),
                            Move(S.STARTING, words.starting)))
        case Released():
            return _to(S.RUNNING, life.phases.running)
        case Finished():
            if life.stopping:  # it returned after being told it is preempted
                return decide(life, Interrupted(), policy, now)
            return _to(S.SUCCEEDED, life.phases.finished)
        case ReservationTimedOut(message) | StartLost(message):
            return _to(S.PENDING, f"requeued: {message}")
        case MemberFailed(summary, final) if life.stopping and not final:
            # A member that ends badly while its gang is being preempted ends as part of
            # the stop (a Ray job raygang stopped, a worker group Train shut down when
            # told): the gang goes back in line, it has not failed.
            return decide(life, Interrupted(), policy, now)
        case MemberFailed(summary, final):
            return _to(S.FAILED, summary) if final else _failed(life, summary, policy, now)
        case PreemptionSignalled(stopping, why, grace):
            return Outcome((Move(life.state, f"{stopping}: {why}; grace {grace:g}s"),),
                           stopping=stopping)
        case Interrupted():
            if life.stopping and life.cancel_reason is None:  # preempted: back in line
                return Outcome((Move(S.PREEMPTED, life.stopping),
                                Move(S.PENDING, _fenced(life, life.stopping))),
                               preempted_by=life.stopping, not_before=_fence_end(life, now))
            return _to(S.CANCELLED, life.cancel_reason or "cancelled")
        case CancelledWhilePending(reason):
            return _to(S.CANCELLED, reason)
        case Adopted():
            return _to(S.RUNNING, "adopted by the restarted scheduler: members and placement "
                                  "group kept")
        case FoundAfterRestart():
            if life.cancel_reason:
                return Outcome((Move(S.PENDING, "scheduler restarted; carrying out the "
                                                "cancellation"),
                                Move(S.CANCELLED, life.cancel_reason)),
                               requeued_after_restart=True)
            return Outcome((Move(S.PENDING, _fenced(
                life, f"requeued: the scheduler restarted while the gang was "
                      f"{life.state.value}")),),
                requeued_after_restart=True, not_before=_fence_end(life, now))
    raise TypeError(f"not a lifecycle event: {event!r}")


def _to(state: GangState, reason: str) -> Outcome:
    return Outcome((Move(state, reason),))


def _failed(life: Life, summary: str, policy: RestartPolicy, now: float) -> Outcome:
    """Restart whole after a backoff while restarts are left; else FAILED."""
    if life.restarts >= life.max_restarts:
        return _to(S.FAILED, summary)
    restart = life.restarts + 1
    delay = policy.delay(restart)  # a gang that keeps crashing does not hog its queue head
    requeued = f"requeued to restart whole, not before {delay:g}s from now"
    if life.fence_s is not None and life.fence_s > delay:
        delay, requeued = life.fence_s, _fenced(life, "requeued to restart whole")
    return Outcome(
        (Move(S.RESTARTING, f"restart {restart}/{life.max_restarts} after {summary}"),
         Move(S.PENDING, requeued)),
        restarts=restart, not_before=now + delay,
    )


def _fence_end(life: Life, now: float) -> float | None:
    """When a gang with a fence may start again: its last attempt's members, cut off or
    not, have ended by then (each ends itself once out of touch for `fence_s`)."""
    return None if life.fence_s is None else now + life.fence_s


def _fenced(life: Life, reason: str) -> str:
    if life.fence_s is None:
        return reason
    return f"{reason}; not before {life.fence_s:g}s from now (fence_s: its last attempt's " \
           f"members have surely ended by then)"
