"""Keeping the queues' usage over time (`core.usage`) across cycles and restarts.

The loop hands every cycle's snapshot to `UsageKeeper.observed`, which books the time
since the last cycle with what each queue held then and gives the snapshot the ledger's
view; the gangs a plan admits are charged their admission penalty (`admitted`). The
ledger is state the scheduler must not lose: a scheduler that forgot it after a restart
would hand a queue that ran the cluster all week the same share as one that ran nothing.
It is written to the store (table `usage`): each slice of the window once, when it
closes (an hour for a week's window), and its head (the open slice, what is held now,
when) at most every `SAVE_S` of the clock: a restart loses at most that much usage.
"""

from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot, PlacedGang
from raygang.core.usage import UsageLedger, UsagePolicy

USAGE = "usage"  # the store's table
HEAD = "head"  # its key for the ledger's head; each closed slice's is `slice-<start>`
SAVE_S = 30.0
IDLE_S = 10.0  # with no cycle, usage is booked at most this often


class UsageKeeper:
    """The ledger, and what of it is still to be written."""

    def __init__(self, policy: UsagePolicy):
        self.ledger = UsageLedger(policy)
        self._saved_at = float("-inf")
        self._saved: deque[float] = deque()  # the starts of the closed slices written
        self.dirty = False

    def observed(self, now: float, snapshot: ClusterSnapshot, policy: UsagePolicy
                 ) -> ClusterSnapshot:
        """Book the time up to `now` and return `snapshot` with the ledger's view."""
        self.ledger.policy = policy  # a changed policy applies from now on
        capacity = Resources.sum(n.total for n in snapshot.alive_nodes)
        self.ledger.advance(now, _by_queue(snapshot.placed), capacity)
        self._due(now)
        return dataclasses.replace(snapshot, usage=self.ledger.view())

    def held(self, now: float, placed: Callable[[], Iterable[PlacedGang]]) -> None:
        """Book the time up to `now` without a cycle (nothing waits): what `placed()`
        holds from now on, on the capacity last observed. At most every `IDLE_S`: a loop
        with nothing waiting wakes every second (an error of seconds on runs of hours)."""
        at = self.ledger.at
        if at is None or now - at >= IDLE_S:
            self.ledger.advance(now, _by_queue(placed()), self.ledger.capacity)
            self._due(now)

    def admitted(self, now: float, charges: Iterable[tuple[str, Resources]]) -> None:
        """Each admitted gang (queue, what it holds) holds that from now on (its
        reservation), and is charged its admission penalty."""
        seconds = self.ledger.policy.admission_penalty_s
        for queue, amount in charges:
            self.ledger.started(queue, amount)
            self.ledger.charge(queue, amount, seconds)
        self._due(now)

    def _due(self, now: float) -> None:
        closed = self.ledger.closed
        if now - self._saved_at >= SAVE_S or (
                closed and (not self._saved or closed[-1].start > self._saved[-1])):
            self.dirty = True

    # The store ---------------------------------------------------------------------------
    def writes(self) -> tuple[dict[str, bytes], list[str]]:
        """(records to put, keys to delete) to bring the store up to the ledger, which
        counts as saved from now on (`forget_saved` if the writes fail). Slices close at
        the end of the window and leave at its start: only those are written or deleted."""
        closed, saved = self.ledger.closed, self._saved
        first = closed[0].start if closed else math.inf
        gone = []
        while saved and saved[0] < first:
            gone.append(_slice_key(saved.popleft()))
        last = saved[-1] if saved else -math.inf
        puts = {}
        for part in reversed(closed):
            if part.start <= last:
                break
            puts[_slice_key(part.start)] = _dumps(part.data())
            saved.append(part.start)
        self._saved = deque(sorted(saved))
        puts[HEAD] = _dumps(self.ledger.head())
        self._saved_at = self.ledger.at if self.ledger.at is not None else -math.inf
        self.dirty = False
        return puts, gone

    def forget_saved(self) -> None:
        """A write failed: write everything again next time."""
        self._saved.clear()
        self.dirty = True

    @classmethod
    def load(cls, policy: UsagePolicy, records: Mapping[str, bytes]) -> UsageKeeper:
        """A keeper with the ledger read back from the store's `usage` records (an empty
        one if there are none)."""
        keeper = cls(policy)
        if HEAD not in records:
            return keeper
        data = json.loads(records[HEAD])
        slices = [json.loads(raw) for key, raw in records.items() if key != HEAD]
        data["closed"] = sorted(slices, key=lambda s: s["start"])
        keeper.ledger = UsageLedger.load(policy, data)
        keeper._saved = deque(s["start"] for s in data["closed"])
        return keeper


class LoopUsage:
    """The loop's side: a keeper while time-based fair share is on (`policy()`), told of
    each cycle's snapshot, of what is held between cycles and of what a plan admitted;
    `due` is told when the keeper is due to be written (the journal's writer)."""

    def __init__(self, policy: Callable[[], UsagePolicy]):
        self._policy = policy
        self.keeper = UsageKeeper(policy()) if policy().enabled else None
        self.due: Callable[[UsageKeeper], None] = lambda keeper: None

    def restore(self, records: dict[str, bytes]) -> bool:
        """The usage as the store kept it (after a restart); True if some was found."""
        policy = self._policy()
        if not policy.enabled:
            return False
        self.keeper = UsageKeeper.load(policy, records)
        return self.keeper.ledger.at is not None

    def observed(self, now: float, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """A cycle's snapshot, with the queues' usage up to `now` (as is, if off)."""
        if self.keeper is None:
            return snapshot
        snapshot = self.keeper.observed(now, snapshot, self._policy())
        self._tell(self.keeper)
        return snapshot

    def shown(self, snapshot: ClusterSnapshot) -> ClusterSnapshot:
        """`snapshot` with the usage as of the last look (for `queues()`), if kept."""
        if self.keeper is None:
            return snapshot
        return dataclasses.replace(snapshot, usage=self.keeper.ledger.view())

    def idle(self, now: float, held: Callable[[], Iterable[PlacedGang]]) -> None:
        """No cycle (nothing waits): usage goes on all the same, with what is `held`."""
        if self.keeper is not None:
            self.keeper.held(now, held)
            self._tell(self.keeper)

    def admitted(self, now: float, charges: Iterable[tuple[str, Resources]]) -> None:
        """A plan's admissions, carried out: (queue, what the gang holds) each."""
        if self.keeper is not None:
            self.keeper.admitted(now, charges)
            self._tell(self.keeper)

    def _tell(self, keeper: UsageKeeper) -> None:
        if keeper.dirty:
            self.due(keeper)


def _by_queue(placed: Iterable[PlacedGang]) -> dict[str, Resources]:
    """What each queue holds (gangs of one shape counted once: thousands run)."""
    shapes = Counter((gang.queue, gang.total) for gang in placed)
    held: dict[str, list[Resources]] = {}
    for (queue, total), count in shapes.items():
        held.setdefault(queue, []).append(total * count)
    return {q: Resources.sum(v) for q, v in held.items()}


def _slice_key(start: float) -> str:
    return f"slice-{start!r}"


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
