"""The registry: every gang the scheduler knows, and the indexes over them.

One record per gang (`GangRecord`), found by id; deployments by name (the latest gang of
each); idempotency keys; the submission sequence; and the finished gangs in the order they
finished, of which only the last `finished_kept` are remembered.
"""

from __future__ import annotations

import collections
import itertools
from collections.abc import Collection, Iterator

from raygang.control.errors import GangNotFoundError
from raygang.control.idempotency import IdempotencyKeys
from raygang.control.records import GangRecord
from raygang.core.gang import GangState


class Registry:
    def __init__(self, finished_kept: int):
        self.finished_kept = finished_kept
        self._gangs: dict[str, GangRecord] = {}
        self._finished: collections.deque[str] = collections.deque()  # oldest first
        self._deployments: dict[str, str] = {}  # deployment name -> its latest gang id
        self._seq = itertools.count()
        self.keys = IdempotencyKeys()

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
        """Gangs to schedule: stored, and not being cancelled."""
        return [r for r in self._gangs.values()
                if r.state is GangState.PENDING and r.saved and r.cancel_reason is None]

    def due(self, now: float) -> list[GangRecord]:
        """Pending gangs a cycle at `now` considers: those not waiting out a restart backoff."""
        return [r for r in self.pending() if r.not_before is None or r.not_before <= now]

    def matching(self, state: GangState | None,
                 queues: Collection[str] | None) -> list[GangRecord]:
        """In submission order, optionally only in `state` and in `queues`."""
        return [
            r for r in self._gangs.values()
            if (state is None or r.state is state) and (queues is None or r.spec.queue in queues)
        ]

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
        if record.deployment is not None:
            self._deployments[record.deployment.name] = record.gang_id

    def forget_unsaved(self, record: GangRecord) -> None:
        """A submission the store did not take: as if it never came (it may be retried)."""
        if self._gangs.get(record.gang_id) is not record:
            return
        del self._gangs[record.gang_id]
        if record.idempotency_key is not None:
            self.keys.forget(record.idempotency_key)
        if record.deployment is not None and \
                self._deployments.get(record.deployment.name) == record.gang_id:
            del self._deployments[record.deployment.name]

    def restore(self, record: GangRecord) -> None:
        """A gang read back from the store after a restart (in submission order)."""
        record.saved = True
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
            gone = self._gangs.pop(self._finished.popleft(), None)
            if gone is not None:
                dropped.append(gone)
        return dropped
