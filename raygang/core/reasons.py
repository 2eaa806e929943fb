"""Why each gang a cycle leaves pending waits: a reason with numbers (`Plan.waiting`).

Worked out once the actions ran, against the capacity they left (what users see next):
the gang that cannot fit even on the empty cluster, the one waiting behind its queue's
blocked first gang (a bounded line: past `backfill_lookahead` gangs set aside), the one
set aside behind one of its kind, the one at its queue's limit, and the one with no room,
with what each action that tried for it found (nobody to stop, or not enough), what its
minimum runtime protects and until when, its delay, and the capacity held for another.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from raygang.core.domain_reasons import why_not_placed
from raygang.core.gang import PendingGang, Shape
from raygang.core.plan import Behind, Lazy, WaitCode, Waiting
from raygang.core.preemption.pool import Candidates

if TYPE_CHECKING:  # the cycle makes its reasons
    from raygang.core.cycle import Cycle


class Reasons:
    """The reasons of one cycle's pending gangs (`explain`)."""

    def __init__(self, cycle: Cycle):
        self.cycle = cycle
        # This cycle's capacity's words: (its signature, shape -> why it does not fit
        # there), from the scheduler's memory while the signature is the same (a busy
        # cluster's cycles often end on the same free capacity, and these words are the
        # costly part of a reason: they scan the capacity). Shapes with a topology read
        # node labels too, and are worked out each cycle.
        self._shapes: tuple[tuple[object, ...], Mapping[Shape, str]] | None = None

    def explain(self, eager: bool) -> Lazy:
        """A reason with numbers for every gang left pending, against the capacity left
        after this cycle's decisions (what users see next); computed once per shape.
        Without backfill, the gangs behind a queue's first gang that could ever fit wait
        behind it; in a best-effort line, the runs the last pass set aside whole wait as
        the gang they were set aside behind: unless `eager`, the reasons of both are
        worked out when asked (`Behind`)."""
        by_shape: dict[Shape, str] = {}
        behind: dict[str, Behind] = {}
        alike: dict[str, list[Behind]] = {}
        waiting, runs = self.cycle.waiting, self.cycle.aside.runs
        for queue, gangs in self.cycle.left.items():
            blocker: PendingGang | None = None
            backfill = self.cycle.lookahead(queue) is None  # a best-effort line blocks none
            looked = len(gangs.head)  # the gangs a pass looked at (tried or set aside)
            i = 0
            while i < len(gangs):
                gang = gangs[i]
                if blocker is not None and not eager and i >= looked:
                    first = waiting[blocker.gang_id].message
                    behind[queue] = Behind(gangs.tail, gangs.start + i - looked,
                                           functools.partial(self._behind, blocker, first),
                                           blocker.gang_id)
                    break
                run = runs.get(gang.gang_id) if backfill and i < looked else None
                if run is not None:  # (its gangs follow each other in the line)
                    ahead, members = run
                    said = functools.partial(self._like, ahead)
                    if eager:
                        waiting.update((g.gang_id, said(g)) for g in members)
                    else:
                        alike.setdefault(queue, []).append(Behind(
                            members, 0, said, ahead.gang_id, waiting[ahead.gang_id].code))
                    i += len(members)
                    continue
                like = self.cycle.aside.get(gang.gang_id) if i < looked else None
                if like is not None and like.gang_id in waiting:
                    waiting[gang.gang_id] = self._like(like, gang)
                else:
                    over = i >= looked or gang.gang_id in self.cycle.passed_over
                    waiting[gang.gang_id] = self._reason(
                        gang, blocker if over else None, by_shape)
                if blocker is None and self.cycle.ever.fits(gang) and not backfill:
                    blocker = gang
                i += 1
        return behind, alike

    def _like(self, like: PendingGang, gang: PendingGang) -> Waiting:
        """A gang set aside behind one of its kind (`core.walk`): it waits as that one."""
        first = self.cycle.waiting[like.gang_id]
        return Waiting(
            gang.gang_id, first.code,
            f"waiting as gang {like.gang_id} does (the same shape and priority, earlier in "
            f"queue {gang.queue!r}): {first.message}", behind=like.gang_id)

    def _behind(self, blocker: PendingGang, first: str, gang: PendingGang) -> Waiting:
        if not self.cycle.ever.fits(gang):
            return self._never(gang, blocker)
        return Waiting(
            gang.gang_id, WaitCode.BEHIND,
            f"waiting behind gang {blocker.gang_id} (priority {blocker.priority}, earlier "
            f"in queue {gang.queue!r}; {self._past(gang.queue)}), which cannot start yet: "
            f"{first}",
            behind=blocker.gang_id,
        )

    def _past(self, queue: str) -> str:
        n, short = self.cycle.lookahead(queue), self.cycle.short_runtime(queue)
        assert self.cycle.backlog is not None  # (explained after a run)
        if queue not in self.cycle.backlog.declared:
            short = 0.0  # none of its gangs declares a run time: nothing to say
        past = "backfill is off" if not n else \
            f"a cycle passes it and at most {n} more of its line that cannot start"
        return past if not short else \
            f"{past}, and gangs that declare a max_runtime_s of at most {short:g} s"

    def _never(self, gang: PendingGang, blocker: PendingGang | None) -> Waiting:
        """A gang that cannot fit even on the empty cluster; behind `blocker` in line if
        one is blocked ahead of it (it would wait behind it once it fit)."""
        reason = why_not_placed(gang.bundles, gang.strategy, self.cycle.ever.empty,
                                gang.layout)
        return Waiting(gang.gang_id, WaitCode.UNSCHEDULABLE,
                       f"cannot fit on the cluster as it is now, even empty: {reason}",
                       behind=None if blocker is None else blocker.gang_id)

    def _reason(self, gang: PendingGang, blocker: PendingGang | None,
                by_shape: dict[Shape, str]) -> Waiting:
        if not self.cycle.ever.fits(gang):
            return self._never(gang, blocker)
        if blocker is not None:
            return self._behind(blocker, self.cycle.waiting[blocker.gang_id].message, gang)
        if gang.gang_id in self.cycle.limited:
            return Waiting(gang.gang_id, WaitCode.LIMIT, self.cycle.limited[gang.gang_id])
        if gang.shape not in by_shape:
            by_shape[gang.shape] = self._unfit(gang)
        # Whether anyone was left to stop is looked at only here, for the few gangs that
        # end up waiting: a search's candidates can be long to walk.
        notes = "".join(
            (self.cycle.actions[action].no_room or {})["none" if candidates.empty() else "some"]
            + self._young_note(action, candidates)
            for action, candidates in self.cycle.tried.get(gang.gang_id, ())
        )
        notes += "".join(
            f"; it may {action} once pending {self.cycle.actions[action].delay_key} {delay:g} s "
            f"(in {left:.0f} s)"
            for action, delay, left in self.cycle.delayed.get(gang.gang_id, ()))
        gated = self.cycle.gated.get(gang.gang_id)
        if gated is not None:
            action, refused = gated
            assert refused.until is not None
            notes += (f"; {refused.why}: it may {action} in "
                      f"{max(0.0, refused.until - self.cycle.now):.0f} s")
        return Waiting(gang.gang_id, WaitCode.NO_FIT, by_shape[gang.shape] + notes
                       + self._hold_note(gang))

    def _unfit(self, gang: PendingGang) -> str:
        """Why `gang` does not fit on the capacity the actions left."""
        capacity = self.cycle.capacity
        if gang.layout is not None:
            return why_not_placed(gang.bundles, gang.strategy, capacity, gang.layout)
        memory = self.cycle.memory
        if self._shapes is None:
            signature = capacity.signature()
            kept = memory.unplaced
            self._shapes = kept if kept[0] == signature else (signature, {})
        signature, words = self._shapes
        found = words.get(gang.shape)
        if found is None:
            found = why_not_placed(gang.bundles, gang.strategy, capacity, None)
            # A new entry, replacing the kept one whole (another thread may read that)
            self._shapes = memory.unplaced = (signature, {**words, gang.shape: found})
        return found

    def _hold_note(self, gang: PendingGang) -> str:
        holds = self.cycle.holds
        sla = self.cycle.config.sla_waiting_time_s or 0.0
        own = holds.get(gang.gang_id)
        return "".join("; " + hold.note(gang, self.cycle.now, sla)
                       for hold in ([own] if own is not None else holds.values()))

    def _young_note(self, action: str, candidates: Candidates) -> str:
        """What the action's minimum runtime keeps it from stopping, and until when."""
        young = [until for g, until in self.cycle.young(action) if candidates.would_admit(g)]
        if not young:
            return ""
        rules = self.cycle.actions[action]
        least = rules.min_runtime_s(self.cycle.config.preemption)
        plural = "gang is" if len(young) == 1 else "gangs are"
        return (f" ({len(young)} more {plural} protected by {rules.min_runtime_key} "
                f"{least:g} s since their last start; the first may be stopped in "
                f"{max(0.0, min(young) - self.cycle.now):.0f} s)")
