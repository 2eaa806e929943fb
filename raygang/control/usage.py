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
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot, PlacedGang
from raygang.core.usage import UsageLedger, UsagePolicy

USAGE = "usage"  # the store's table
HEAD = "head"  # its key for the ledger's head; each closed slice's is `slice-<start>`
SAVE_S = 30.0


class UsageKeeper:
    """The ledger, and what of it is still to be written."""

    def __init__(self, policy: UsagePolicy):
        self.ledger = UsageLedger(policy)
        self._saved_at = float("-inf")
        self._saved_slices: set[str] = set()
        self.dirty = False

    def observed(self, now: float, snapshot: ClusterSnapshot, policy: UsagePolicy
                 ) -> ClusterSnapshot:
        """Book the time up to `now` and return `snapshot` with the ledger's view."""
        self.ledger.policy = policy  # a changed policy applies from now on
        capacity = Resources.sum(n.total for n in snapshot.alive_nodes)
        self.ledger.advance(now, _by_queue(snapshot.placed), capacity)
        self._due(now)
        return dataclasses.replace(snapshot, usage=self.ledger.view())

    def held(self, now: float, placed: Iterable[PlacedGang]) -> None:
        """Book the time up to `now` without a cycle (nothing waits): what `placed` holds
        from now on, on the capacity last observed."""
        self.ledger.advance(now, _by_queue(placed), self.ledger.capacity)
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
                closed and _slice_key(closed[-1].start) not in self._saved_slices):
            self.dirty = True

    # The store ---------------------------------------------------------------------------
    def writes(self) -> tuple[dict[str, bytes], list[str]]:
        """(records to put, keys to delete) to bring the store up to the ledger, which
        counts as saved from now on (`forget_saved` if the writes fail)."""
        data = self.ledger.data()
        closed = {_slice_key(s["start"]): s for s in data.pop("closed")}
        puts = {key: _dumps(s) for key, s in closed.items() if key not in self._saved_slices}
        puts[HEAD] = _dumps(data)
        gone = [key for key in self._saved_slices if key not in closed]
        self._saved_slices = set(closed)
        self._saved_at = self.ledger.at if self.ledger.at is not None else float("-inf")
        self.dirty = False
        return puts, gone

    def forget_saved(self) -> None:
        """A write failed: write everything again next time."""
        self._saved_slices.clear()
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
        keeper._saved_slices = {_slice_key(s["start"]) for s in data["closed"]}
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

    def idle(self, now: float, held: Callable[[], Iterable[PlacedGang]]) -> None:
        """No cycle (nothing waits): usage goes on all the same, with what is `held`."""
        if self.keeper is not None:
            self.keeper.held(now, held())
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
    held: dict[str, list[Resources]] = {}
    for gang in placed:
        held.setdefault(gang.queue, []).append(gang.total)
    return {q: Resources.sum(v) for q, v in held.items()}


def _slice_key(start: float) -> str:
    return f"slice-{start!r}"


def _dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()
