"""The journal: what the scheduler writes to its store, and when.

- A submission (gang or deployment) is written before it is acknowledged (`saved`); only
  then may it be admitted.
- A change to a gang is written soon after it happens (`changed`, by the writer task,
  coalesced: a gang changed ten times between two writes is written once).
- A gang's end, and its small results, are written before its members are torn down
  (`write`, `keep_results`): a scheduler restarting in between must not run it again.
- A queue changed at run time is written before it is applied (`put_queue`).
- The queues' usage over time (`control.usage`), when kept, by the writer task as the
  loop marks it due (`usage_changed`).
"""

from __future__ import annotations

import asyncio
import logging
import pickle
from collections.abc import Awaitable, Callable
from typing import Any

from raygang.control.config import StateConfig
from raygang.control.durable import (
    GANGS,
    QUEUES,
    RESULTS,
    Pickler,
    dump_gang,
    dump_queue,
    load_gang,
    load_queue,
)
from raygang.control.errors import StoreError
from raygang.control.records import GangRecord
from raygang.control.store import Store
from raygang.control.usage import USAGE, UsageKeeper
from raygang.core.queues import QueueSpec

log = logging.getLogger(__name__)
STORE_RETRY_S = 1.0  # a failed write (or recovery) is tried again after this long


class Journal:
    def __init__(self, store: Store, state: StateConfig, pickler: Pickler = pickle):
        self.store = store
        self.state = state
        self.pickler = pickler
        self._dirty: dict[str, GangRecord | None] = {}  # gang id -> to write (None: delete)
        self._dirty_wake = asyncio.Event()
        self._results_gone: set[str] = set()  # kept results of forgotten gangs, to delete
        self._usage: UsageKeeper | None = None  # usage over time, due to be written

    # Writing --------------------------------------------------------------------------
    async def saved(self, record: GangRecord, forget: Callable[[GangRecord], None]) -> str:
        """Write a new submission before it is acknowledged; only then may it be admitted.
        A retry (same idempotency key) waits for the same write. If the store refuses it,
        `forget(record)` drops it and the caller gets a StoreError."""
        if not record.live.saved:
            if record.live.saving is None:
                record.live.saving = asyncio.ensure_future(self.write(record))
            try:
                await asyncio.shield(record.live.saving)
            except Exception as error:
                if not record.live.saved:
                    forget(record)
                raise StoreError(
                    f"the submission was not accepted: the store did not take it ({error})"
                ) from None
            record.live.saved = True
        return record.gang_id

    async def write(self, record: GangRecord) -> None:
        """Write the gang as it is now, at once (the writer task may write it again)."""
        store = self.store
        await store.put(GANGS, record.gang_id,
                        b"" if store.discards else dump_gang(record, self.pickler))

    def changed(self, record: GangRecord) -> None:
        """A gang changed: the writer task writes it soon (state changes are not waited
        for; the ones that matter after a restart are written at once, see `write`)."""
        if record.live.saved:
            self._dirty[record.gang_id] = record
            self._dirty_wake.set()

    def usage_changed(self, keeper: UsageKeeper) -> None:
        """The queues' usage is due to be written: the writer task writes it soon."""
        self._usage = keeper
        self._dirty_wake.set()

    def forget(self, record: GangRecord) -> None:
        """A finished gang no longer remembered: out of the store too (and its results)."""
        self._dirty[record.gang_id] = None
        self._dirty_wake.set()
        if record.results_kept:  # with the writer's next batch: no task left unreferenced
            self._results_gone.add(record.gang_id)

    async def writer(self) -> None:
        """The writer task: drains the changed gangs, retrying what failed."""
        while True:
            await self._dirty_wake.wait()
            self._dirty_wake.clear()
            batch, self._dirty = self._dirty, {}
            gone, self._results_gone = self._results_gone, set()
            failed = False
            for gang_id in gone:
                try:
                    await self.store.delete(RESULTS, gang_id)
                except Exception:
                    log.warning("deleting results of %s failed", gang_id, exc_info=True)
                    self._results_gone.add(gang_id)
                    failed = True
            for gang_id, record in batch.items():
                try:
                    if record is None:
                        await self.store.delete(GANGS, gang_id)
                    else:
                        await self.write(record)
                except Exception:
                    log.warning("writing gang %s to the store failed", gang_id, exc_info=True)
                    self._dirty.setdefault(gang_id, record)
                    failed = True
            failed = not await self._write_usage() or failed
            if failed:
                await asyncio.sleep(STORE_RETRY_S)
                self._dirty_wake.set()

    async def _write_usage(self) -> bool:
        """Write the queues' usage if it is due; False if the store refused."""
        keeper, self._usage = self._usage, None
        if keeper is None or not keeper.dirty:
            return True
        puts, gone = keeper.writes()
        try:
            for key, value in puts.items():
                await self.store.put(USAGE, key, value)
            for key in gone:
                await self.store.delete(USAGE, key)
        except Exception:
            log.warning("writing the queues' usage to the store failed", exc_info=True)
            keeper.forget_saved()
            self._usage = keeper
            return False
        return True

    async def load_usage(self) -> dict[str, bytes]:
        """The queues' usage as written (`control.usage`); empty if none was."""
        return await self.store.load(USAGE)

    async def keep_results(self, record: GangRecord,
                           fetch: Callable[[list[Any]], Awaitable[list[Any]]]) -> None:
        """Copy small results into the store, so a restarted scheduler can hand them out
        (the results a run returns may die with the process that owns them: this one)."""
        limit = self.state.results_max_bytes
        if not limit or not record.live.result_refs:
            return
        try:
            blob = self.pickler.dumps(await fetch(record.live.result_refs))
        except Exception:  # unpicklable, or already gone: they stay refs only
            log.warning("results of %s not kept", record.gang_id, exc_info=True)
            return
        if len(blob) <= limit:
            await self.store.put(RESULTS, record.gang_id, blob)
            record.results_kept = True

    async def put_queue(self, queue: QueueSpec) -> None:
        await self.store.put(QUEUES, queue.name, dump_queue(queue))

    async def clear(self) -> None:
        """Forget everything (a shutdown ends this scheduler's history; a crash keeps it)."""
        for table in (GANGS, QUEUES, RESULTS, USAGE):
            for key in await self.store.keys(table):
                await self.store.delete(table, key)

    # Reading back ---------------------------------------------------------------------
    async def load(self) -> tuple[list[QueueSpec], list[GangRecord]]:
        """Queues changed at run time, and every stored gang in submission order."""
        queues = [load_queue(raw) for raw in (await self.store.load(QUEUES)).values()]
        records = sorted((load_gang(raw, self.pickler)
                          for raw in (await self.store.load(GANGS)).values()),
                         key=lambda r: r.seq)
        return queues, records

    async def results(self, record: GangRecord) -> list[Any] | None:
        """A finished gang's results as kept in the store (None: not kept)."""
        if not record.results_kept:
            return None
        raw = await self.store.get(RESULTS, record.gang_id)
        return None if raw is None else self.pickler.loads(raw)

    async def expire_results(self, records: list[GangRecord], now: float) -> int:
        """Drop kept results past their retention (and any of a gang no longer known)."""
        keep_for = self.state.results_retention_s
        fresh = {r.gang_id for r in records if r.results_kept and r.finished_at is not None
                 and now - r.finished_at < keep_for}
        expired = 0
        for gang_id in await self.store.keys(RESULTS):
            if gang_id not in fresh:
                await self.store.delete(RESULTS, gang_id)
                expired += 1
        for record in records:
            record.results_kept = record.gang_id in fresh
        return expired
