"""The pending gangs one cycle decides on, as lines: one per queue, in admission order.

A cycle looks at each queue's line from its head and, on a bounded line, stops once it has
set aside `backfill_lookahead` + 1 gangs it cannot admit (the first, with 0): everything
behind them waits behind the first. A best-effort line (no bound, the default) is walked to
its end, but run by run: a run of alike gangs set aside is passed over whole
(`Line.run_end`). So a cycle costs what it looks at, not what waits: the lines are read in
place (never copied or sorted per cycle), what a queue's pending gangs ask for in all comes
with them, and the reasons and queue positions of the gangs behind a blocked head are
worked out when asked for (`plan.Waitings`, `plan.Positions`). The runtime keeps its lines
sorted as gangs come and go (`control.registry`); `Backlog.of` sorts a plain list of gangs.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from itertools import compress, islice
from typing import Protocol

from raygang.core.gang import PendingGang
from raygang.core.resources import Resources


@dataclass(frozen=True)
class Backlog:
    """`lines`: queue -> its pending gangs sorted by `PendingGang.order_key` (the cycle
    reads them in place: hand it a copy if they change meanwhile); `totals`: queue ->
    the distinct totals its gangs ask for, with how many ask each (its demand, and which
    gangs its limits turn away); `find`: a pending gang by id, for reading a line lazily;
    `declared`: queue -> how many of its gangs declare a `max_runtime_s` (absent: none),
    so that a pass looks for those past a blocked head only where there are some;
    `runs`: queue -> where the runs of its line start (`run_starts`), where its keeper
    knows them from an earlier cycle, and `keep_runs(queue, starts)`: what a cycle that
    worked them out for a line as given hands back (most lines do not change between
    two cycles, and a best-effort line is read run by run in every pass)."""

    lines: Mapping[str, Sequence[PendingGang]]
    totals: Mapping[str, Mapping[Resources, int]]
    find: Callable[[str], PendingGang | None] = field(default=lambda gang_id: None)
    declared: Mapping[str, int] = field(default_factory=dict)
    runs: Mapping[str, list[int]] = field(default_factory=dict)
    keep_runs: Callable[[str, list[int]], None] = field(default=lambda queue, starts: None)

    @classmethod
    def of(cls, pending: Iterable[PendingGang]) -> Backlog:
        """A backlog of these gangs (sorted here, once)."""
        lines: dict[str, list[PendingGang]] = {}
        totals: dict[str, dict[Resources, int]] = {}
        by_id: dict[str, PendingGang] = {}
        declared: dict[str, int] = {}
        for gang in sorted(pending, key=PendingGang.order_key):
            lines.setdefault(gang.queue, []).append(gang)
            counts = totals.setdefault(gang.queue, {})
            counts[gang.total] = counts.get(gang.total, 0) + 1
            by_id[gang.gang_id] = gang
            if gang.spec.max_runtime_s is not None:
                declared[gang.queue] = declared.get(gang.queue, 0) + 1
        return cls(lines, totals, by_id.get, declared)

    def __len__(self) -> int:
        return sum(len(line) for line in self.lines.values())


def index_in(line: Sequence[PendingGang], gang: PendingGang) -> int | None:
    """Where `gang` is in a sorted line, or None."""
    i = bisect.bisect_left(line, gang.order_key(), key=PendingGang.order_key)
    return i if i < len(line) and line[i].gang_id == gang.gang_id else None


class Locator:
    """Where a pending gang stands in a cycle's lines: (its queue, its index there, the
    gang as the cycle saw it), or None. A few lookups bisect the sorted line; past
    `INDEX_AFTER` of them (a list of every gang's status asks for each), one pass indexes
    every gang in line, so a list of n statuses costs O(n), not O(n log n) twice over."""

    INDEX_AFTER = 64

    def __init__(self, lines: Mapping[str, Sequence[PendingGang]],
                 find: Callable[[str], PendingGang | None]):
        self._lines = lines
        self._find = find
        self._asked = 0
        self._index: dict[str, tuple[str, int, PendingGang]] | None = None

    def __call__(self, gang_id: str) -> tuple[str, int, PendingGang] | None:
        if self._index is None:
            self._asked += 1
            if self._asked <= self.INDEX_AFTER:
                return self._bisect(gang_id)
            self._index = {gang.gang_id: (queue, i, gang)
                           for queue, line in self._lines.items()
                           for i, gang in enumerate(line)}
        where = self._index.get(gang_id)
        if where is None:
            return None
        # As the bisect would: a gang whose place changed since the cycle (its priority)
        # is not where the cycle saw it.
        now = self._find(gang_id)
        return where if now is not None and now.order_key() == where[2].order_key() else None

    def _bisect(self, gang_id: str) -> tuple[str, int, PendingGang] | None:
        gang = self._find(gang_id)
        line = None if gang is None else self._lines.get(gang.queue)
        if gang is None or line is None:
            return None
        i = index_in(line, gang)
        return None if i is None else (gang.queue, i, line[i])


class Line:
    """A queue's gangs still undecided during a cycle: `head` (gangs a pass looked at and
    did not admit) then `tail[start:]` (the line as given, not looked at yet), so that a
    pass over a few gangs at the front never copies the rest."""

    __slots__ = ("head", "tail", "start", "_view", "_starts", "_keep")

    def __init__(self, tail: Sequence[PendingGang], starts: list[int] | None = None,
                 keep: Callable[[list[int]], None] | None = None):
        """`starts`: where the runs of `tail` start, if known (`run_starts`); `keep`:
        told them when worked out here for `tail` as given."""
        self.head: list[PendingGang] = []
        self.tail = tail
        self.start = 0
        self._view: list[PendingGang] | None = None  # the line as one list, when asked
        self._starts = starts  # where its runs start (`run_end`); read, never changed
        self._keep = keep  # None once a gang left the line (its runs are its own then)

    def __len__(self) -> int:
        return len(self.head) + len(self.tail) - self.start

    def __getitem__(self, i: int) -> PendingGang:
        head = self.head
        return head[i] if i < len(head) else self.tail[self.start + i - len(head)]

    def __iter__(self) -> Iterator[PendingGang]:
        yield from self.head
        for i in range(self.start, len(self.tail)):
            yield self.tail[i]

    def between(self, begin: int, end: int) -> list[PendingGang]:
        """Gangs `begin` to `end` (excluded), as a list."""
        return self._whole()[begin:end]

    def run_end(self, i: int) -> int:
        """Where the run of gang `i` ends (excluded): the gangs after it up to there are of
        its kind (shape, priority, class) and each pending no longer than the one before,
        so a pass that set gang `i` aside, or set others aside behind it, sets them all
        aside alike (`core.walk`). Worked out for the whole line when a pass first asks,
        in C (a line changes only after a pass): a jump costs a bisect, not a visit."""
        starts = self._starts
        if starts is None:
            starts = self._starts = run_starts(self._whole())
            if self._keep is not None:
                self._keep(starts)
                self._keep = None
        return starts[bisect.bisect_right(starts, i)]

    def _whole(self) -> list[PendingGang]:
        if self._view is None:
            self._view = [*self.head, *self.tail[self.start:]]
        return self._view

    def drop(self, looked: int, admitted: AbstractSet[str]) -> None:
        """After a pass that looked at the first `looked` gangs: they are the head now,
        less the `admitted` (those of this line's queue); the runs, where known, follow
        (`runs_after_removing`). (Copies and filters in C: a best-effort line is looked at
        whole in every pass.)"""
        head = self.head
        if looked <= len(head):  # (a gang of the head not looked at stays in it)
            part, rest, end = head[:looked], head[looked:], self.start
        else:
            end = self.start + looked - len(head)
            part, rest = [*head, *self.tail[self.start:end]], []
        gone = list(map(admitted.__contains__, map(_GANG_ID, part))) if admitted else ()
        if any(gone):  # else the line reads as before: its runs stand
            starts = self._starts
            if starts is not None:
                self._starts = runs_after_removing(
                    starts, self, list(compress(range(len(part)), gone)))
            self._view = self._keep = None  # (runs of a line less a gang are its own)
            part = list(compress(part, map(operator.not_, gone)))
        self.head, self.start = part + rest, end


_GANG_ID = operator.attrgetter("gang_id")
_KIND = operator.attrgetter("spec.shape", "priority", "preemptible")  # as `walk` compares
_SINCE = operator.attrgetter("pending_since")


def run_starts(gangs: list[PendingGang]) -> list[int]:
    """Where each run of `gangs` starts after the first, then `len(gangs)`: a run is gangs
    of one kind, each pending since no earlier than the one before (`_breaks`). A gang
    pending since no known time (`_waited_no_longer`) makes every gang a run of its own.
    (Read pair by pair: the kind's test decides most pairs, and a line's runs are
    worked out about once, `runs_after_insert` and `runs_after_removing` moving them.)"""
    n = len(gangs)
    if None in map(_SINCE, gangs):
        return list(range(1, n + 1))
    return [*compress(range(1, n), map(_breaks, gangs, islice(gangs, 1, None))), n]


class _Gangs(Protocol):
    """What the runs' helpers read of a line: a list, or a `Line` mid-pass."""

    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> PendingGang: ...


def _breaks(before: PendingGang, after: PendingGang) -> bool:
    """Whether a run breaks between two gangs next to each other. Equal shapes are
    mostly one object (`GangSpec.shape`), so the kinds compare at once."""
    return _KIND(before) != _KIND(after) or _SINCE(before) > _SINCE(after)


def runs_after_insert(starts: list[int], line: _Gangs, i: int,
                      gang: PendingGang) -> list[int] | None:
    """`run_starts` of `line` once `gang` joins it at `i`, from `starts`, those of
    `line` as it is: only the breaks on either side of the new gang are read, the others
    move. None where that is not known so: every gang is a run of its own (which a gang
    pending since no known time makes them), or the new gang is pending since none."""
    n = len(line)
    if len(starts) == n or gang.pending_since is None:
        return None
    breaks = starts[:-1]
    k = bisect.bisect_left(breaks, i)
    out = breaks[:k]
    if i > 0 and _breaks(line[i - 1], gang):
        out.append(i)
    if i < n and _breaks(gang, line[i]):
        out.append(i + 1)
    # the break at i was between the gangs now on either side of the new one: read above
    out.extend([s + 1 for s in breaks[k:] if s != i])
    out.append(n + 1)
    return out


def runs_after_removing(starts: list[int], line: _Gangs,
                        removed: Sequence[int]) -> list[int] | None:
    """`run_starts` of `line` less the gangs at the positions `removed` (sorted), from
    `starts`, those of `line` as it is: a break between two gangs both kept moves; the
    one across a gap the removed leave is read again (None as for `runs_after_insert`)."""
    n = len(line)
    if len(starts) == n:
        return None
    gone = set(removed)
    out = [s - bisect.bisect_left(removed, s) for s in starts[:-1]  # between s - 1 and s
           if s - 1 not in gone and s not in gone]
    for at, i in enumerate(removed):
        if at == 0 or removed[at - 1] != i - 1:
            first = i  # a gap starts
        if i + 1 < n and i + 1 not in gone and first > 0 \
                and _breaks(line[first - 1], line[i + 1]):  # it ends between two kept
            out.append(i - at)
    out.sort()
    out.append(n - len(removed))
    return out


def demand(totals: Mapping[Resources, int]) -> Resources:
    """What a queue's pending gangs ask for in all."""
    return Resources.sum_times(totals.items())
