"""The registry: every gang the scheduler knows, and the indexes over them.

One record per gang (`GangRecord`), found by id; deployments by name (the latest gang of
each); idempotency keys; the submission sequence; the finished gangs in the order they
finished, of which only the last `finished_kept` are remembered. Kept up to date as gangs
change (`changed`), so that no call has to walk every gang:

- the backlog: per queue, the pending gangs a cycle may admit, sorted in admission order,
  with the totals they ask for; gangs waiting out a restart backoff join it when due;
- per state and per queue, the gangs in submission order (pages of `list_gangs`), and how
  many there are of each state in each queue (totals, metrics);
- the Ray Jobs, in submission order (`list_jobs`).
"""

from __future__ import annotations

import bisect
import collections
import heapq
import itertools
from collections.abc import Callable, Collection, Iterable, Iterator

from raygang.control import kinds
from raygang.control.errors import GangNotFoundError
from raygang.control.idempotency import IdempotencyKeys
from raygang.control.records import GangRecord
from raygang.core.backlog import Backlog, index_in, runs_after_insert, runs_after_removing
from raygang.core.gang import GangState, PendingGang
from raygang.core.plan import Plan, Waitings
from raygang.core.resources import Resources

_Ids = list[tuple[int, str]]  # (seq, gang id), sorted: submission order


class Registry:
    def __init__(self, finished_kept: int, clock: Callable[[], float]):
        self.finished_kept = finished_kept
        self._clock = clock
        self._gangs: dict[str, GangRecord] = {}  # in submission order
        self._finished: collections.deque[str] = collections.deque()  # oldest first
        self._deployments: dict[str, str] = {}  # deployment name -> its latest gang id
        self._seq = itertools.count()
        self.keys = IdempotencyKeys()
        # Indexes (see the module's docstring), and where each gang is in them.
        self._lines: dict[str, list[PendingGang]] = {}
        self._totals: dict[str, dict[Resources, int]] = {}
        # queue -> where the runs of its line start, once a cycle worked them out, and
        # how often the line changed (a cycle's answer for an older line is not kept).
        # A cycle runs in a thread of its own: what it works out goes into the last
        # backlog's `found`, and is taken in here, in the loop's thread, at the next.
        self._runs: dict[str, list[int]] = {}
        self._changes: collections.Counter[str] = collections.Counter()
        self._found: tuple[dict[str, int], dict[str, list[int]]] | None = None
        # queue -> how many of its line declare a max_runtime_s (core.backlog.Backlog)
        self._declared: collections.Counter[str] = collections.Counter()
        self._backoff: list[tuple[float, int, str]] = []  # heap; stale entries skipped
        self._by_state: dict[GangState, _Ids] = {}
        self._by_queue: dict[str, _Ids] = {}
        self._counts: collections.Counter[tuple[GangState, str]] = collections.Counter()
        self._kinds: collections.Counter[tuple[GangState, str]] = collections.Counter()
        self._state: dict[str, GangState] = {}  # gang id -> the state it is indexed under
        self._where: dict[str, str] = {}  # gang id -> "line" | "backoff" | "inside" (pending)
        self._children: dict[str, set[str]] = {}  # job id -> unfinished gangs inside it
        self._jobs: dict[str, None] = {}  # the Ray Jobs' gang ids, in submission order

    # Reading ------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._gangs)

    def __iter__(self) -> Iterator[GangRecord]:
        return iter(self._gangs.values())

    def __contains__(self, gang_id: object) -> bool:
        return gang_id in self._gangs

    def get(self, gang_id: str) -> GangRecord:
        try:
            return self._gangs[gang_id]
        except KeyError:
            raise GangNotFoundError(f"no gang with id {gang_id!r}") from None

    __getitem__ = get

    def find(self, gang_id: str) -> GangRecord | None:
        return self._gangs.get(gang_id)

    def pending(self) -> list[GangRecord]:
        """Gangs to schedule: stored, and not being cancelled (those waiting out a restart
        backoff included); not those waiting inside a job's budget."""
        return [self._gangs[g] for g, where in self._where.items() if where != "inside"]

    def pending_totals(self) -> dict[str, dict[Resources, int]]:
        """Per queue, the distinct totals the gangs of `pending` ask for, and how many ask
        each: the lines' totals and those of the few gangs in a restart backoff."""
        totals = {queue: dict(counts) for queue, counts in self._totals.items() if counts}
        for gang_id in {g for _, _, g in self._backoff if self._where.get(g) == "backoff"}:
            gang = self._gangs[gang_id].pending_view()
            counts = totals.setdefault(gang.queue, {})
            counts[gang.total] = counts.get(gang.total, 0) + 1
        return totals

    def pending_gang(self, gang_id: str) -> PendingGang | None:
        """A gang to schedule, as `pending` lists them, by id (None: not one now)."""
        where = self._where.get(gang_id)
        return None if where is None or where == "inside" else self._gangs[gang_id].pending_view()

    def waiting_inside(self) -> list[GangRecord]:
        """Gangs to place inside their job's budget (`control.inside`), in submission
        order (those waiting out a restart backoff included)."""
        waiting = (g for children in self._children.values() for g in children
                   if self._where.get(g) == "inside")  # not a walk over every pending gang
        return sorted((self._gangs[g] for g in waiting), key=lambda r: r.seq)

    def jobs_with_gangs(self) -> list[str]:
        """The jobs with unfinished gangs inside them."""
        return list(self._children)

    def inside(self, parent: str) -> list[GangRecord]:
        """The unfinished gangs placed (or waiting) inside job `parent`'s budget."""
        return sorted((self._gangs[g] for g in self._children.get(parent, ())),
                      key=lambda r: r.seq)

    def backlog(self, now: float) -> Backlog:
        """The pending gangs a cycle at `now` decides on (not those in a restart backoff),
        as a copy: the cycle may run while gangs come and go."""
        self._due(now)
        self._take_found()
        lines = {q: list(line) for q, line in self._lines.items() if line}
        totals = {q: dict(self._totals[q]) for q in lines}
        declared = {q: n for q, n in self._declared.items() if n}
        runs = {q: self._runs[q] for q in lines if q in self._runs}
        found: dict[str, list[int]] = {}
        self._found = ({q: self._changes[q] for q in lines}, found)
        return Backlog(lines, totals, self._pending_view, declared, runs, found.__setitem__)

    def _take_found(self) -> None:
        """Keep the runs the last backlog's cycle worked out, of lines unchanged since."""
        if self._found is None:
            return
        seen, found = self._found
        self._found = None
        for queue, starts in list(found.items()):  # (a copy: its cycle may still run)
            if self._changes[queue] == seen[queue]:
                self._runs[queue] = starts

    def _pending_view(self, gang_id: str) -> PendingGang | None:
        record = self._gangs.get(gang_id)
        return None if record is None else record.pending_view()

    def count(self, state: GangState, queue: str) -> int:
        return self._counts[state, queue]

    def counts(self) -> collections.Counter[tuple[GangState, str]]:
        """How many gangs there are of each (state, queue)."""
        return collections.Counter(self._counts)

    def kind_counts(self) -> collections.Counter[tuple[GangState, str]]:
        """How many gangs there are of each (state, kind)."""
        return collections.Counter(self._kinds)

    def page(self, state: GangState | None, queues: Collection[str] | None, offset: int,
             limit: int, newest_first: bool = False) -> tuple[list[GangRecord], int]:
        """One page of the gangs in submission order (or newest first), optionally only in
        `state` and in `queues`, and how many match in all. Costs the page (and, with both
        filters, the smaller of the two indexes), not every gang."""
        ids, total = self._matching(state, queues, newest_first)
        return [self._gangs[g] for g in itertools.islice(ids, offset, offset + limit)], total

    def _matching(self, state: GangState | None, queues: Collection[str] | None,
                  newest_first: bool) -> tuple[Iterable[str], int]:
        """(gang ids in submission order, or newest first; how many)."""
        def ordered(ids: _Ids) -> Iterator[str]:
            return (g for _, g in (reversed(ids) if newest_first else ids))

        def merged(lists: list[_Ids]) -> Iterator[str]:
            if newest_first:
                return (g for _, g in heapq.merge(*map(reversed, lists), reverse=True))
            return (g for _, g in heapq.merge(*lists))

        if state is None and queues is None:
            keys = self._gangs.keys()
            return (reversed(keys) if newest_first else iter(keys)), len(self._gangs)
        if queues is None:
            by_state = self._by_state.get(state, [])  # type: ignore[arg-type]
            return ordered(by_state), len(by_state)
        wanted = set(queues)
        lists = [self._by_queue.get(q, []) for q in sorted(wanted)]
        if state is None:
            return merged(lists), sum(len(x) for x in lists)
        total = sum(self._counts[state, q] for q in wanted)
        by_state = self._by_state.get(state, [])
        if len(by_state) <= sum(len(x) for x in lists):
            return (g for g in ordered(by_state) if self._gangs[g].spec.queue in wanted), total
        return (g for g in merged(lists) if self._gangs[g].state is state), total

    def matching(self, state: GangState | None,
                 queues: Collection[str] | None) -> list[GangRecord]:
        """In submission order, optionally only in `state` and in `queues`."""
        return self.page(state, queues, 0, len(self._gangs))[0]

    def jobs(self, state: GangState | None = None) -> list[GangRecord]:
        """The Ray Jobs (gangs of a `ray_job` kind), in submission order, optionally in
        `state`."""
        records = (self._gangs[g] for g in self._jobs)
        return [r for r in records if state is None or r.state is state]

    def unfinished(self) -> list[GangRecord]:
        return [r for r in self._gangs.values() if not r.state.finished]

    def deployment(self, name: str) -> GangRecord | None:
        """The latest gang of deployment `name`, if remembered."""
        return self._gangs.get(self._deployments.get(name, ""))

    def deployments(self) -> list[GangRecord]:
        return [self._gangs[g] for g in self._deployments.values() if g in self._gangs]

    # Changing -----------------------------------------------------------------------
    def next_seq(self) -> int:
        return next(self._seq)

    def add(self, record: GangRecord) -> None:
        """A new submission (not yet stored)."""
        self._gangs[record.gang_id] = record
        bisect.insort(self._by_queue.setdefault(record.spec.queue, []),
                      (record.seq, record.gang_id))
        if kinds.of(record.kind).by_name:  # a deployment: known by its name
            self._deployments[record.spec.name] = record.gang_id
        if kinds.of(record.kind).ray_job:
            self._jobs[record.gang_id] = None
        if record.parent is not None and not record.state.finished:
            self._children.setdefault(record.parent, set()).add(record.gang_id)
        self.changed(record)

    def changed(self, record: GangRecord) -> None:
        """The gang changed (state, stored, cancellation asked, backoff): re-index it."""
        gang_id, queue = record.gang_id, record.spec.queue
        if self._gangs.get(gang_id) is not record:
            return  # forgotten meanwhile
        was = self._state.get(gang_id)
        if was is not record.state:
            if was is not None:
                _remove(self._by_state[was], (record.seq, gang_id))
                self._counts[was, queue] -= 1
                self._kinds[was, record.kind] -= 1
            bisect.insort(self._by_state.setdefault(record.state, []), (record.seq, gang_id))
            self._counts[record.state, queue] += 1
            self._kinds[record.state, record.kind] += 1
            self._state[gang_id] = record.state
        if record.state.finished:
            self._drop_child(record)
        schedulable = (record.state is GangState.PENDING and record.live.saved
                       and record.cancel_reason is None)
        where = None
        if schedulable and record.parent is not None:
            where = "inside"  # not the core's to admit: its job's budget holds it
        elif schedulable:
            due = record.not_before is None or record.not_before <= self._clock()
            where = "line" if due else "backoff"
        if self._where.get(gang_id) != where:
            self._unplace(record)
            if where == "line":
                self._line_add(record)
            elif where == "backoff":
                assert record.not_before is not None  # "backoff" means it has one
                heapq.heappush(self._backoff, (record.not_before, record.seq, gang_id))
                self._where[gang_id] = "backoff"
            elif where == "inside":
                self._where[gang_id] = "inside"

    def _drop_child(self, record: GangRecord) -> None:
        if record.parent is not None and record.parent in self._children:
            children = self._children[record.parent]
            children.discard(record.gang_id)
            if not children:
                del self._children[record.parent]

    def _due(self, now: float) -> None:
        """Gangs whose restart backoff is over join their queue's line."""
        while self._backoff and self._backoff[0][0] <= now:
            _, _, gang_id = heapq.heappop(self._backoff)
            record = self._gangs.get(gang_id)
            if record is not None and self._where.get(gang_id) == "backoff":
                self._unplace(record)
                self._line_add(record)

    def _line_add(self, record: GangRecord) -> None:
        gang = record.pending_view()
        line = self._lines.setdefault(gang.queue, [])
        i = bisect.bisect_right(line, gang.order_key(), key=PendingGang.order_key)
        self._changed_line(gang.queue, lambda starts: runs_after_insert(starts, line, i, gang))
        line.insert(i, gang)
        totals = self._totals.setdefault(gang.queue, {})
        totals[gang.total] = totals.get(gang.total, 0) + 1
        if gang.spec.max_runtime_s is not None:
            self._declared[gang.queue] += 1
        self._where[record.gang_id] = "line"

    def _unplace(self, record: GangRecord) -> None:
        where = self._where.pop(record.gang_id, None)
        if where != "line":
            return  # a backoff entry is skipped when it comes up
        gang = record.pending_view()
        line = self._lines[gang.queue]
        i = index_in(line, gang)
        assert i is not None, gang.gang_id  # placed in its line, so found there
        self._changed_line(gang.queue, lambda starts: runs_after_removing(starts, line, [i]))
        del line[i]
        totals = self._totals[gang.queue]
        totals[gang.total] -= 1
        if not totals[gang.total]:
            del totals[gang.total]
        if gang.spec.max_runtime_s is not None:
            self._declared[gang.queue] -= 1

    def _changed_line(self, queue: str,
                      moved: Callable[[list[int]], list[int] | None]) -> None:
        """A gang joins or leaves `queue`'s line: its runs, where known, follow."""
        starts = self._runs.pop(queue, None)
        if starts is not None:
            starts = moved(starts)
            if starts is not None:
                self._runs[queue] = starts
        self._changes[queue] += 1

    def forget_unsaved(self, record: GangRecord) -> None:
        """A submission the store did not take: as if it never came (it may be retried)."""
        if self._gangs.get(record.gang_id) is not record:
            return
        self._forget(record)
        if record.idempotency_key is not None:
            self.keys.forget(record.idempotency_key)

    def _forget(self, record: GangRecord) -> None:
        gang_id, queue = record.gang_id, record.spec.queue
        self._unplace(record)
        state = self._state.pop(gang_id, None)
        if state is not None:
            _remove(self._by_state[state], (record.seq, gang_id))
            self._counts[state, queue] -= 1
            self._kinds[state, record.kind] -= 1
        _remove(self._by_queue[queue], (record.seq, gang_id))
        del self._gangs[gang_id]
        self._jobs.pop(gang_id, None)
        self._drop_child(record)
        if kinds.of(record.kind).by_name and \
                self._deployments.get(record.spec.name) == gang_id:
            del self._deployments[record.spec.name]

    def restore(self, record: GangRecord) -> None:
        """A gang read back from the store after a restart (in submission order)."""
        record.live.saved = True
        self.add(record)
        if record.idempotency_key and record.fingerprint:
            self.keys.remember(record.idempotency_key, record.fingerprint, record.gang_id,
                               record.submitted_at)
        if record.state.finished:
            self._finished.append(record.gang_id)

    def resume_seq(self) -> None:
        """After a restore: new submissions come after every gang read back."""
        self._seq = itertools.count(max((r.seq for r in self._gangs.values()), default=-1) + 1)

    def finished(self, record: GangRecord) -> list[GangRecord]:
        """`record` reached its final state: remember it among the finished, and forget
        the oldest beyond `finished_kept`; returns those forgotten."""
        if not record.state.finished:
            return []
        self._finished.append(record.gang_id)
        dropped = []
        while len(self._finished) > self.finished_kept:
            gone = self._gangs.get(self._finished.popleft())
            if gone is not None:
                self._forget(gone)
                dropped.append(gone)
        return dropped

    def note_waiting(self, plan: Plan) -> tuple[dict[tuple[str, str], int], dict[str, float]]:
        """Tell each gang a cycle looked at, still pending, why it waits and where; and
        count them: (queue, wait code) -> gangs, and queue -> the earliest `pending_since`
        of its gangs looked at."""
        waits: dict[tuple[str, str], int] = {}
        since: dict[str, float] = {}
        for waiting in plan.looked_at.values():
            record = self.find(waiting.gang_id)
            if record is not None and record.state is GangState.PENDING:
                record.set_waiting(waiting.code, waiting.message,
                                   plan.positions.get(waiting.gang_id))
                key = (record.spec.queue, waiting.code.value)
                waits[key] = waits.get(key, 0) + 1
                at = record.pending_view().pending_since
                if at is not None:
                    since[key[0]] = min(at, since.get(key[0], at))
        # The gangs behind a blocked queue head, and the runs set aside whole, are counted,
        # not walked: BEHIND is what almost all of the former say (one that could never
        # fit says UNSCHEDULABLE when asked), and a run says what the gang it waits as says.
        if isinstance(plan.waiting, Waitings):
            for queue, line in plan.waiting.groups():
                key = (queue, line.code.value)
                waits[key] = waits.get(key, 0) + len(line.line) - line.start
        return waits, since


def _remove(ids: _Ids, item: tuple[int, str]) -> None:
    i = bisect.bisect_left(ids, item)
    if i < len(ids) and ids[i] == item:
        del ids[i]
