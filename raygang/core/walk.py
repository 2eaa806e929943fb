"""One pass of a cycle's action over the queues' lines (`Cycle.run` makes one per action).

The queues take turns in fair-share order (`fairshare.QueueOrder`); each offers its line
from the head. A bounded line (`backfill_lookahead` set) stops after `backfill_lookahead` +
1 gangs it could not admit; past that only gangs that declare a `max_runtime_s` of at most
`backfill_max_runtime_s` are still offered (as Slurm's backfill starts the jobs whose time
limit lets them), and the rest wait behind the line's first blocked gang.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from raygang.core.fairshare import QueueOrder
from raygang.core.gang import PendingGang

if TYPE_CHECKING:  # the cycle runs the passes
    from raygang.core.cycle import Cycle

_NONE: frozenset[str] = frozenset()  # a line's admitted gangs where it had none


def walk(cycle: Cycle, attempt: Callable[[PendingGang], bool]) -> None:
    """Offer each queue's gangs, in fair-share order, to `attempt`. On a bounded line a
    queue stops once more than `backfill_lookahead` of its gangs were not admitted
    (0: at the first). A gang like the last one tried and not admitted earlier in its
    line this pass (its shape, priority and class) is set aside without a try: it would
    fail alike, and the cost of a pass stays in what it admits and in the distinct kinds
    it meets (unless it waited longer: a delay or a trade may let it do what the other
    could not; then it is tried, and those behind it are compared with it).
    Past the lookahead, a line whose gangs declare run times goes on for those that
    declare at most its `backfill_max_runtime_s`, until the last declared one; the rest
    are passed over (`Cycle.passed_over`: they wait behind the first blocked gang).
    A best-effort line (no lookahead) jumps over the rest of a run (`Line.run_end`) once
    one of it is not admitted: a pass over a line of thousands costs the runs it meets,
    not the gangs in them."""
    order = QueueOrder(cycle.book, [q for q, gangs in cycle.left.items() if gangs])
    cycle.aside.new_pass()
    at = dict.fromkeys(cycle.left, 0)
    passed = dict.fromkeys(cycle.left, 0)
    seen = dict.fromkeys(cycle.declared, 0)  # declared gangs this pass looked at
    lookaheads = {queue: cycle.lookahead(queue) for queue in cycle.left}  # once a pass
    # queue -> kind -> the last gang of that kind this pass tried and did not admit
    # (unlike `cycle.failed`: the shapes whose victim search failed, a memo the statement
    # keeps while capacity stays as it was)
    behind_of: dict[str, dict[tuple[object, ...], PendingGang]] = {}
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
        aside = behind_of.get(queue)
        like = None if aside is None else aside.get(kind)
        behind = gang  # what the gangs of its run behind it are set aside behind
        if like is not None and _waited_no_longer(gang, like):
            cycle.aside.put(gang.gang_id, like)
            admitted, behind = False, like
        elif cycle.holds and (hold := cycle.holds.get(gang.gang_id)) is not None:
            cycle.aside.forget(gang.gang_id)
            admitted = cycle.held_attempt(hold, attempt)
        else:
            cycle.aside.forget(gang.gang_id)
            admitted = attempt(gang)
        if admitted:
            order.touched(queue)
            if runs is not None and queue in declared:
                declared[queue] -= 1  # (the pass has seen it: the count stays right)
                seen[queue] -= 1
            continue
        if behind is gang:  # tried in vain: it waited longer than the one before it (else
            behind_of.setdefault(queue, {})[kind] = gang  # set aside): gangs go behind it
        lookahead = lookaheads[queue]
        if lookahead is None:
            # The rest of its run would be set aside one by one behind `behind`: each is
            # of its kind and pending no longer (`seen` is not kept: only a bounded line
            # reads it)
            line = cycle.left[queue]
            if (end := line.run_end(i - 1)) > i:
                cycle.aside.put_run(line.between(i, end), behind)
                at[queue] = end
                if end >= sizes[queue]:
                    order.done(queue)
            continue
        if queue in beyond:
            continue
        passed[queue] += 1
        if passed[queue] > lookahead:
            bound = cycle.short_runtime(queue)
            if bound and seen.get(queue, 0) < declared.get(queue, 0):
                beyond[queue] = bound
            else:
                order.done(queue)
    admitted_in = cycle.statement.admitted_in
    for queue, gangs in cycle.left.items():  # (most lines admitted none: not read)
        gangs.drop(at[queue], admitted_in.get(queue, _NONE))


def _waited_no_longer(gang: PendingGang, than: PendingGang) -> bool:
    """Whether `gang` has been pending no longer than `than`. One pending since no known
    time is like only another such: it waits no delay (`Clock.delay_left`) but its wait
    weighs nothing in a trade (`trade.waiting_cost`), so neither way is it ahead."""
    if than.pending_since is None or gang.pending_since is None:
        return than.pending_since is None and gang.pending_since is None
    return gang.pending_since >= than.pending_since


class Aside:
    """Gang id -> the gang of its kind earlier in its line that a pass set it aside behind
    (`walk`; the reasons read it), and the runs the last pass set aside whole: their first
    gang's id -> (the gang they wait as, the run). A best-effort line is walked to its
    end in every pass, so the last pass's runs are what its reasons say; they are read
    gang by gang only when asked (`plan.Behind`)."""

    __slots__ = ("_one", "runs")

    def __init__(self) -> None:
        self._one: dict[str, PendingGang] = {}
        self.runs: dict[str, tuple[PendingGang, Sequence[PendingGang]]] = {}

    def new_pass(self) -> None:
        self.runs = {}

    def put(self, gang_id: str, like: PendingGang) -> None:
        self._one[gang_id] = like

    def put_run(self, gangs: Sequence[PendingGang], like: PendingGang) -> None:
        self.runs[gangs[0].gang_id] = (like, gangs)

    def forget(self, gang_id: str) -> None:
        """The gang was tried: it is behind none now."""
        self._one.pop(gang_id, None)

    def get(self, gang_id: str) -> PendingGang | None:
        """The gang it was set aside behind on its own (not in a run)."""
        return self._one.get(gang_id)
