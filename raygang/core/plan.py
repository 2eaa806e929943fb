"""What one scheduling cycle decided, as data. Only `raygang.runtime` acts on a plan."""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

from raygang.core.backlog import index_in

if TYPE_CHECKING:
    from raygang.core.gang import PendingGang


@dataclass(frozen=True, slots=True)
class Admission:
    """Start this gang with bundle i pinned to `nodes[i]` — once the gangs `waits_for` are
    gone: gangs being stopped this cycle whose resources it takes. They are its own
    `victims` (stopped for it) and, if it takes what other gangs' victims free beyond
    their preemptors' need, those too (draining.py)."""

    gang_id: str
    nodes: tuple[str, ...]
    action: str = "allocate"  # or "reclaim" / "preempt"
    victims: tuple[str, ...] = ()
    waits_for: tuple[str, ...] = ()

    @property
    def waits_for_others(self) -> tuple[str, ...]:
        """The gangs it waits for that were stopped for other gangs."""
        return tuple(g for g in self.waits_for if g not in self.victims)


@dataclass(frozen=True, slots=True)
class Preemption:
    """Stop `victim` (whole) and requeue it, so that `preemptor` fits; or, if `members`
    names some, only those surplus members of the elastic gang `victim` (a shrink: it runs
    on, smaller). `Admission.waits_for` names such a member `<gang id>/<member>`."""

    victim: str
    preemptor: str
    action: str  # "reclaim" (its queue was over its share), "preempt" (lower priority)
    # or "shrink" (surplus of its own queue, for a gang that comes first)
    reason: str
    members: tuple[str, ...] = ()

    @property
    def whole(self) -> bool:
        return not self.members


@dataclass(frozen=True, slots=True)
class Growth:
    """Add members to the running elastic gang `gang_id`: `members[i]` on `nodes[i]`."""

    gang_id: str
    members: tuple[str, ...]
    nodes: tuple[str, ...]


class WaitCode(str, enum.Enum):
    NO_FIT = "NO_FIT"  # not enough free resources of the right shape right now
    BEHIND = "BEHIND"  # a gang earlier in its queue is blocked, and the cycle set aside as
    # many of the queue's gangs as backfill_lookahead lets it
    LIMIT = "LIMIT"  # its queue (or a parent) is at its limit, or a non-preemptible gang
    # would borrow beyond its quota what another queue is guaranteed
    UNSCHEDULABLE = "UNSCHEDULABLE"  # cannot fit even on the empty cluster as it is now


@dataclass(frozen=True, slots=True)
class Waiting:
    gang_id: str
    code: WaitCode
    message: str
    behind: str | None = None  # the blocked head of its queue it comes after, if any


@dataclass(frozen=True, slots=True)
class Plan:
    admissions: tuple[Admission, ...] = ()
    waiting: Mapping[str, Waiting] = field(default_factory=lambda: MappingProxyType({}))
    at: float = 0.0
    preemptions: tuple[Preemption, ...] = ()
    positions: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    """1-based place of each pending gang in its queue's order."""
    growths: tuple[Growth, ...] = ()
    grow_waits: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    """Why each running elastic gang below its maximum grows no further this cycle."""
    timings: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}),
                                         compare=False)
    """Seconds each action took (its passes over the lines and the running gangs): a
    measurement for the operator (KAI's per-action latency), not a decision, so two plans
    that decide alike are equal whatever it says, and a dump leaves it out."""
    steady_until: float | None = field(default=None, compare=False)
    """Until when the clock alone changes none of these decisions (`core.clock`): a cycle
    before it, on the same cluster and backlog, decides alike (inf: until something
    changes; None: not said, as by a decider other than the core's cycle). When to look
    again, not a decision: plans that decide alike are equal whatever it says."""

    @property
    def looked_at(self) -> Mapping[str, Waiting]:
        """The waiting gangs the cycle looked at itself (the others wait behind a blocked
        queue head: read them from `waiting` one by one when needed)."""
        waiting = self.waiting
        return waiting.explicit if isinstance(waiting, Waitings) else waiting

    @property
    def admitted_ids(self) -> list[str]:
        return [a.gang_id for a in self.admissions]


# Reasons and positions of the gangs behind a blocked queue head, worked out when asked ---
Locate = Callable[[str], "tuple[str, int, PendingGang] | None"]


@dataclass(frozen=True)
class Behind:
    """Gangs that wait as one gang does, read when asked: those of a line from `start` on,
    behind its blocked head `blocker` (backfill off), or a run that a pass set aside whole
    behind `blocker`, a gang of its kind (`core.walk`; `start` 0, `line` the run). Each
    one's reason is `reason(gang)` (it may be another: a gang that can never fit); `code`
    is what they say (counted, not walked: `control.registry`)."""

    line: Sequence[PendingGang]
    start: int
    reason: Callable[[PendingGang], Waiting]
    blocker: str  # the blocked head's id, or the gang the run waits as
    code: WaitCode = WaitCode.BEHIND


# Each queue's gangs behind its blocked head, and the runs set aside whole in its line
Lazy = tuple[Mapping[str, Behind], Mapping[str, Sequence[Behind]]]


class Waitings(Mapping[str, Waiting]):
    """Why each undecided gang waits: those the cycle looked at (`explicit`), and, read
    when asked, those behind a blocked queue head and those set aside in runs."""

    def __init__(self, explicit: dict[str, Waiting], lazy: Lazy, locate: Locate,
                 later: Callable[[], Lazy] | None = None):
        """`lazy`: the gangs behind blocked heads and the runs set aside (`Behind`);
        `later`: what works out the reasons of the gangs looked at (into `explicit`) and
        returns those, run when a reason is first read (a replay reads none:
        `control.loop`'s `explains`)."""
        self._explicit, (self._behind, self._runs), self._later = explicit, lazy, later
        self._locate = locate

    @property
    def explicit(self) -> dict[str, Waiting]:
        self.work_out()
        return self._explicit

    @property
    def behind(self) -> Mapping[str, Behind]:
        self.work_out()
        return self._behind

    def groups(self) -> Iterator[tuple[str, Behind]]:
        """(queue, gangs that wait alike) for every line behind a blocked head and every
        run set aside."""
        self.work_out()
        yield from self._behind.items()
        for queue, runs in self._runs.items():
            for run in runs:
                yield queue, run

    def work_out(self) -> None:
        """Work the reasons out now, if not yet (in the thread that decided). Marked done
        only once they are: a reader meanwhile works them out too (alike), never reads
        half of them."""
        later = self._later
        if later is not None:
            self._behind, self._runs = later()
            self._later = None

    def __getitem__(self, gang_id: str) -> Waiting:
        found = self.explicit.get(gang_id)
        if found is not None:
            return found
        where = self._locate(gang_id)
        if where is not None:
            queue, i, gang = where
            line = self.behind.get(queue)
            if line is not None and i >= line.start:
                return line.reason(gang)
            runs = self._runs.get(queue, ())
            # The runs are in line order: the last one starting at or before the gang
            key = gang.order_key()
            k = bisect.bisect_right(runs, key, key=_first_key) - 1
            if k >= 0 and index_in(runs[k].line, gang) is not None:
                return runs[k].reason(gang)
        raise KeyError(gang_id)

    def __iter__(self) -> Iterator[str]:
        yield from self.explicit
        for _, line in self.groups():
            for i in range(line.start, len(line.line)):
                yield line.line[i].gang_id

    def __len__(self) -> int:
        return len(self.explicit) + sum(len(b.line) - b.start for _, b in self.groups())

    def __repr__(self) -> str:
        if self._later is not None:
            return "Waitings(not worked out yet)"
        lazy = len(self) - len(self.explicit)
        return f"Waitings({len(self.explicit)} looked at, {lazy} behind others)"

    def materialized(self) -> dict[str, Waiting]:
        """Every reason, those behind a blocked head or in a run worked out now (for a
        dump, asked for once: a cycle never walks them)."""
        out = dict(self.explicit)
        for _, line in self.groups():
            for i in range(line.start, len(line.line)):
                gang = line.line[i]
                out.setdefault(gang.gang_id, line.reason(gang))
        return out

    def signature(self) -> tuple[object, ...]:
        """What changes when the set of waiting gangs changes (without walking them)."""
        return (frozenset(self.explicit), len(self),
                frozenset((q, b.start, len(b.line), b.line[b.start].gang_id)
                          for q, b in self.groups() if b.start < len(b.line)))


def _first_key(run: Behind) -> tuple[int, int, str]:
    return run.line[0].order_key()


class Positions(Mapping[str, int]):
    """Each undecided gang's 1-based place in its queue's line, found when asked."""

    def __init__(self, lines: Mapping[str, Sequence[PendingGang]], locate: Locate):
        self._lines = lines
        self._locate = locate

    def __getitem__(self, gang_id: str) -> int:
        where = self._locate(gang_id)
        if where is None:
            raise KeyError(gang_id)
        return where[1] + 1

    def __iter__(self) -> Iterator[str]:
        for line in self._lines.values():
            for gang in line:
                yield gang.gang_id

    def __len__(self) -> int:
        return sum(len(line) for line in self._lines.values())

    def materialized(self) -> dict[str, int]:
        """Every place in line, read off the lines (not looked up one gang at a time)."""
        return {gang.gang_id: i + 1 for line in self._lines.values()
                for i, gang in enumerate(line)}

    def __repr__(self) -> str:
        return f"Positions({len(self)} gangs in {len(self._lines)} queue lines)"
