"""One cycle's moves, made through one statement: admit, stop, checkpoint, rollback.

Learned from KAI Scheduler's session `Statement` (pkg/scheduler/framework/statement.go):
an action does not change the session's state by hand; it asks the statement to allocate a
job or evict a victim, the statement applies the move to the in-memory state at once and
records how to take it back, and the action then commits what it did or discards it, in
reverse order. Here the state is a cycle's scratch capacity (`Capacity`), its queue book
(`QueueBook`), the capacity its victims free (`Draining`) and the plan so far (admissions,
stops, the gangs admitted and taken, what each queue's victims held), plus two memos that
capacity decides: the shapes known not to fit on it (`failed`), and the victims a gate
refused (`refused`, `core.preemption.trade.Gate`). Moves:

- `admit`: a gang on its nodes (waiting for the victims whose capacity it takes);
- `stop`: the victims a search found for a gang (the search leaves them freed on the
  capacity and the book; a gang stopped whole loses what is left of its surplus too);
- `grow`: one more member of a running elastic gang (the grow action);
- `unhold`: what is held for the elected gang (`core.reserve`) offered to it.

Between `checkpoint` and `commit` or `rollback` every move records its undo; `rollback`
takes them back, latest first. Outside a checkpoint nothing is recorded: a cycle's moves
are final, and the hot path pays for no undo it will never run. A victim search's own
tentative frees (`core.preemption`) stay on the capacity and the book directly: they are
its scratch work, undone by itself, and only the victims it keeps become a `stop`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from raygang.core.capacity import Capacity, Undo
from raygang.core.draining import Draining
from raygang.core.elastic import AND, per_member, stops, with_remaining_units
from raygang.core.fairshare import QueueBook
from raygang.core.gang import PendingGang
from raygang.core.plan import Admission, Preemption
from raygang.core.preemption.trade import Refusal
from raygang.core.reserve import Hold
from raygang.core.resources import Resources
from raygang.core.snapshot import PlacedGang

Why = Callable[[PlacedGang, PendingGang], str]


class Statement:
    """A cycle's scratch state and its plan so far, changed only through its moves."""

    def __init__(self, capacity: Capacity, book: QueueBook, draining: Draining):
        self.capacity = capacity
        self.book = book
        self.draining = draining
        self.admissions: list[Admission] = []
        self.preemptions: list[Preemption] = []
        self.admitted: set[str] = set()
        # queue -> its gangs in `admitted` (a pass drops them from that queue's line only)
        self.admitted_in: dict[str, set[str]] = {}
        self.taken: set[str] = set()  # victims chosen this cycle (gangs and surplus units)
        self.taken_from: dict[str, Resources] = {}  # queue -> what its victims held
        # (action, shape...) keys that found no room: not tried again until a stop frees some
        self.failed: set[tuple[object, ...]] = set()
        # (search key, gate name) -> the gate's refusal of the victims that search found
        self.refused: dict[tuple[object, ...], Refusal] = {}
        # Told of each victim stopped (a cycle's pools: their bounds rise).
        self.on_stop: list[Callable[[PlacedGang], None]] = []
        self._journal: list[Undo] = []
        self._open = 0  # checkpoints not yet committed or rolled back

    # Moves -----------------------------------------------------------------------------
    def admit(self, gang: PendingGang, nodes: tuple[str, ...], action: str,
              victims: Sequence[PlacedGang]) -> None:
        """`gang` on `nodes` (one per bundle), by `action`, its own victims `victims`."""
        own = tuple(v.gang_id for v in victims)
        restore = self.draining.saved(nodes) if self._open else None
        waits = self.draining.take(nodes, gang.bundles, own)
        unreserve = self.capacity.reserve(zip(nodes, gang.bundles))
        unbook = self.book.add(gang.queue, gang.total)
        uncharge = self.book.charge(gang.queue, gang.total)  # usage over time (core.usage)
        if not gang.preemptible:
            self.book.add_firm(gang.queue, gang.total)
        self.admitted.add(gang.gang_id)
        self.admitted_in.setdefault(gang.queue, set()).add(gang.gang_id)
        if any(AND in one for one in waits):  # a ratio step: the plan names its members
            own, waits = per_member(own), per_member(waits)
        self.admissions.append(Admission(gang.gang_id, nodes, action, own, waits))
        if restore is not None:
            def undo() -> None:
                self.admissions.pop()
                self.admitted.discard(gang.gang_id)
                self.admitted_in[gang.queue].discard(gang.gang_id)
                if not gang.preemptible:
                    self.book.add_firm(gang.queue, Resources() - gang.total)
                uncharge()
                unbook()
                unreserve()
                restore()
            self._journal.append(undo)

    def stop(self, gang: PendingGang, victims: list[PlacedGang], action: str, why: Why,
             units_of: dict[str, list[PlacedGang]], freed: Undo | None = None) -> None:
        """Stop `victims` (freed already on the capacity and the book by the search that
        found them; `freed` takes that back) for `gang`, by `action` (`why`: each stop's
        reason). A gang stopped whole loses its surplus units too (`units_of`: gang id ->
        its units), less those an earlier stop of this cycle took: the plan may shrink a
        gang, then stop it whole, for another gang. `victims` gains those units."""
        undos: list[Callable[[], object]] = []
        for unit in with_remaining_units(victims, units_of, self.taken):
            undos.append(self.capacity.release(unit.bundles))
            if unit.queue in self.book.tree.specs:
                undos.append(self.book.remove(unit.queue, unit.total))
            victims.append(unit)
        journal = bool(self._open)
        if journal:
            restore = self.draining.saved(n for v in victims for n, _ in v.bundles)
            before = {v.queue: self.taken_from.get(v.queue) for v in victims}
            n_stops = len(self.preemptions)
        self.draining.add(victims)
        for victim in victims:
            self.taken.add(victim.gang_id)
            self.taken_from[victim.queue] = self.taken_from.get(victim.queue, Resources()) \
                + victim.total
            for tell in self.on_stop:
                tell(victim)
        self.preemptions.extend(stops(victims, gang, action, why))
        remember = self._forget()  # freed leftovers may now fit shapes that failed before
        if journal:
            assert remember is not None

            def undo() -> None:
                del self.preemptions[n_stops:]
                remember()
                for victim in victims:
                    self.taken.discard(victim.gang_id)
                for queue, held in before.items():
                    if held is None:
                        self.taken_from.pop(queue, None)
                    else:
                        self.taken_from[queue] = held
                restore()
                for step in reversed(undos):
                    step()
                if freed is not None:
                    freed()
            self._journal.append(undo)

    def grow(self, queue: str, node: str, bundle: Resources) -> None:
        """One more member (`bundle`) of a running elastic gang of `queue`, on `node`."""
        unreserve = self.capacity.reserve([(node, bundle)])
        unbook = self.book.add(queue, bundle)
        if self._open:
            def undo() -> None:
                unbook()
                unreserve()
            self._journal.append(undo)

    def unhold(self, hold: Hold) -> None:
        """Offer the elected gang what is held for it: free it, and forget which shapes
        failed (they failed with less free). Its undo holds it again; shapes that failed
        before fail again then, and so do those that failed with the hold free."""
        hold.release()
        remember = self._forget()
        if remember is not None:
            def undo() -> None:
                hold.apply()
                remember()
            self._journal.append(undo)

    def _forget(self) -> Callable[[], None] | None:
        """Forget the memos (more is free: what failed may fit, a gate may find other
        victims); when recording, how to remember them again (adding what failed since)."""
        failed, refused = (set(self.failed), dict(self.refused)) if self._open else (None, None)
        self.failed.clear()
        self.refused.clear()
        if failed is None or refused is None:
            return None

        def remember() -> None:
            self.failed.update(failed)
            self.refused.clear()
            self.refused.update(refused)
        return remember

    # Transactions ----------------------------------------------------------------------
    def checkpoint(self) -> int:
        """Start recording undos; returns the mark to commit or roll back to."""
        self._open += 1
        return len(self._journal)

    def commit(self, mark: int) -> None:
        """Keep the moves since `mark` (an outer checkpoint may still take them back)."""
        self._close(mark)
        if not self._open:
            self._journal.clear()

    def rollback(self, mark: int) -> None:
        """Take back every move since `mark`, latest first. Caches built on the state
        meanwhile (a cycle's pools) are the caller's to drop."""
        while len(self._journal) > mark:
            self._journal.pop()()
        self._close(mark)

    def _close(self, mark: int) -> None:
        assert self._open and mark <= len(self._journal), "no such checkpoint"
        self._open -= 1
