"""The scheduler's book of gangs as the store sees it: what is written when.

A mixin of `runtime.scheduler.Scheduler` (it uses the scheduler's `_gangs`, `_store`,
`_dirty`, `_wake`, `_idempotent`, `_deployments` and `_config`), kept apart because it is
one concern: a submission is stored before it is acknowledged (`_saved`), a change soon
after it happens (`_mark_dirty` and the `_writer` task), a gang's end and its small
results before its members are torn down (`_write`, `_keep_results`).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from ray import cloudpickle

from raygang.runtime.durable import GANGS, RESULTS, dump_gang
from raygang.runtime.errors import StoreError
from raygang.runtime.records import GangRecord

log = logging.getLogger(__name__)
STORE_RETRY_S = 1.0  # a failed write (or recovery) is tried again after this long


class DurableBook:
    _gangs: dict[str, GangRecord]
    _dirty: dict[str, GangRecord | None]
    _dirty_wake: asyncio.Event
    _wake: asyncio.Event
    _store: Any
    _idempotent: Any
    _deployments: dict[str, str]
    _config: Any

    async def _saved(self, record: GangRecord) -> str:
        """Write a new submission to the store before it is acknowledged; only then may it
        be admitted. A retry (same idempotency key) waits for the same write."""
        if not record.saved:
            if record.saving is None:
                record.saving = asyncio.ensure_future(
                    self._store.put(GANGS, record.gang_id, dump_gang(record)))
            try:
                await asyncio.shield(record.saving)
            except Exception as error:
                if self._gangs.get(record.gang_id) is record and not record.saved:
                    self._forget_unsaved(record)
                raise StoreError(
                    f"the submission was not accepted: the store did not take it ({error})"
                ) from None
            record.saved = True
            self._wake.set()
        return record.gang_id

    def _forget_unsaved(self, record: GangRecord) -> None:
        del self._gangs[record.gang_id]
        if record.idempotency_key is not None:
            self._idempotent.forget(record.idempotency_key)
        if record.deployment is not None and \
                self._deployments.get(record.deployment.name) == record.gang_id:
            del self._deployments[record.deployment.name]

    async def _keep_results(self, record: GangRecord) -> None:
        """Copy small results into the store, so a restarted scheduler can hand them out
        (object refs die with the process that owns them: this one)."""
        limit = self._config.state.results_max_bytes
        if not limit:
            return
        try:
            blob = cloudpickle.dumps(await asyncio.gather(*record.result_refs))
        except Exception:  # unpicklable, or already gone: they stay refs only
            log.warning("results of %s not kept", record.gang_id, exc_info=True)
            return
        if len(blob) <= limit:
            await self._store.put(RESULTS, record.gang_id, blob)
            record.results_kept = True

    async def _write(self, record: GangRecord) -> None:
        """Write the gang as it is now, at once (the writer task may write it again)."""
        await self._store.put(GANGS, record.gang_id, dump_gang(record))

    def _mark_dirty(self, record: GangRecord) -> None:
        """A gang changed: the writer task writes it soon (state changes are not waited
        for; the ones that matter after a restart are written first, see `_release`)."""
        if record.saved:
            self._dirty[record.gang_id] = record
            self._dirty_wake.set()

    async def _writer(self) -> None:
        while True:
            await self._dirty_wake.wait()
            self._dirty_wake.clear()
            batch, self._dirty = self._dirty, {}
            failed = False
            for gang_id, record in batch.items():
                try:
                    if record is None:
                        await self._store.delete(GANGS, gang_id)
                    else:
                        await self._write(record)
                except Exception:
                    log.warning("writing gang %s to the store failed", gang_id, exc_info=True)
                    self._dirty.setdefault(gang_id, record)
                    failed = True
            if failed:
                await asyncio.sleep(STORE_RETRY_S)
                self._dirty_wake.set()
