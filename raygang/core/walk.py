"""One pass of a cycle's action over the queues' lines (`Cycle.run` makes one per action).

The queues take turns in fair-share order (`fairshare.QueueOrder`); each offers its line
from the head. Without backfill a line stops after `backfill_lookahead` + 1 gangs it
could not admit; past that only gangs that declare a `max_runtime_s` of at most
`backfill_max_runtime_s` are still offered (as Slurm's backfill starts the jobs whose
time limit lets them), and the rest wait behind the line's first blocked gang.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from raygang.core.fairshare import QueueOrder
from raygang.core.gang import PendingGang

if TYPE_CHECKING:  # the cycle runs the passes
    from raygang.core.cycle import Cycle


def walk(cycle: Cycle, attempt: Callable[[PendingGang], bool]) -> None:
    """Offer each queue's gangs, in fair-share order, to `attempt`. Without backfill a
    queue stops once more than `backfill_lookahead` of its gangs were not admitted
    (0: at the first). A gang like one not admitted earlier in its line this pass
    (its shape, priority and class) is set aside without a try: it would fail alike,
    and the cost of a pass stays in what it admits and in the distinct kinds it meets
    (unless it waited longer: a delay or a trade may let it do what the other could not).
    Past the lookahead, a line whose gangs declare run times goes on for those that
    declare at most its `backfill_max_runtime_s`, until the last declared one; the rest
    are passed over (`Cycle.passed_over`: they wait behind the first blocked gang)."""
    order = QueueOrder(cycle.book, [q for q, gangs in cycle.left.items() if gangs])
    at = dict.fromkeys(cycle.left, 0)
    passed = dict.fromkeys(cycle.left, 0)
    seen = dict.fromkeys(cycle.declared, 0)  # declared gangs this pass looked at
    lookaheads = {queue: cycle.lookahead(queue) for queue in cycle.left}  # once a pass
    # queue -> kind -> the first gang of that kind this pass set aside (unlike
    # `cycle.failed`: the shapes whose victim search failed, a memo the statement keeps
    # while capacity stays as it was)
    first_aside: dict[str, dict[tuple[object, ...], PendingGang]] = {}
    # Each line's length, once: lines change only after the pass (`Line.drop`)
    sizes = {queue: len(gangs) for queue, gangs in cycle.left.items()}
    # Past its lookahead a queue's line goes on for the gangs that declare a run of at
    # most its `backfill_max_runtime_s`: queue -> the declared gangs still behind
    declared, beyond = cycle.declared, dict[str, float]()
    while (queue := order.pick()) is not None:
        i = at[queue]
        gang = cycle.left[queue][i]
        at[queue] = i = i + 1
        if i >= sizes[queue]:
            order.done(queue)
        runs = gang.spec.max_runtime_s
        if runs is not None and queue in declared:
            seen[queue] += 1
        if queue in beyond:
            if seen[queue] >= declared[queue]:
                order.done(queue)  # none declares behind it
            if runs is None or runs > beyond[queue]:
                cycle.passed_over.add(gang.gang_id)  # it waits behind the blocked one
                continue
            cycle.passed_over.discard(gang.gang_id)
        if not cycle.ever.fits(gang):
            continue  # never fits here: it blocks nobody
        kind = (gang.shape, gang.priority, gang.preemptible)
        aside = first_aside.get(queue)
        like = None if aside is None else aside.get(kind)
        if like is not None and _waited_no_longer(gang, like):
            cycle.aside[gang.gang_id] = like
            admitted = False
        elif cycle.hold is not None and gang is cycle.hold.gang:
            cycle.aside.pop(gang.gang_id, None)
            admitted = cycle.held_attempt(attempt)
        else:
            cycle.aside.pop(gang.gang_id, None)
            admitted = attempt(gang)
        if admitted:
            order.touched(queue)
            if runs is not None and queue in declared:
                declared[queue] -= 1  # (the pass has seen it: the count stays right)
                seen[queue] -= 1
            continue
        first_aside.setdefault(queue, {}).setdefault(kind, gang)
        if queue in beyond:
            continue
        passed[queue] += 1
        lookahead = lookaheads[queue]
        if lookahead is not None and passed[queue] > lookahead:
            bound = cycle.short_runtime(queue)
            if bound and seen.get(queue, 0) < declared.get(queue, 0):
                beyond[queue] = bound
            else:
                order.done(queue)
    for queue, gangs in cycle.left.items():
        gangs.drop(at[queue], cycle.admitted)


def _waited_no_longer(gang: PendingGang, than: PendingGang) -> bool:
    """Whether `gang` has been pending no longer than `than` (one pending since no known
    time waited no delay: `Clock.delay_left`)."""
    if than.pending_since is None:
        return True
    return gang.pending_since is not None and gang.pending_since >= than.pending_since
