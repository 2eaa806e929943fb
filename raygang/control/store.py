"""Where the scheduler keeps what it must not lose: a small key-value interface by table.

A write returns once the record is durable in the store, so the scheduler acknowledges a
submission, cancellation or queue change only after it is written. Two stores:

- `GcsStore` (default, `runtime/scheduler/gcs_store.py`: it needs Ray): Ray's GCS key-value store,
  in a namespace of its own. It survives restarts of the scheduler actor; with GCS fault
  tolerance (KubeRay's external Redis) it survives a restart of the head too.
- `SqliteStore`: a SQLite file, for a plain local setup where the head may restart without
  GCS fault tolerance. Writes are committed (`synchronous=FULL`, write-ahead log) before
  they return; they run in a thread.

`MemoryStore` keeps records in the process: for tests and for `store: memory` (nothing
survives the actor, stated in the config's description).
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


class Store(ABC):
    """Records (bytes) by table and key. Table and key names are plain strings without '/'
    in the table name."""

    # A store that keeps nothing it is given (a replay's, `sim.engine.DiscardingStore`):
    # a writer need not serialize for it, only take its turn.
    discards = False

    @abstractmethod
    async def put(self, table: str, key: str, value: bytes) -> None:
        """Write one record; durable when this returns."""

    @abstractmethod
    async def delete(self, table: str, key: str) -> None:
        """Remove one record (no error if absent)."""

    @abstractmethod
    async def load(self, table: str) -> dict[str, bytes]:
        """Every record of a table."""

    @abstractmethod
    async def get(self, table: str, key: str) -> bytes | None:
        """One record, or None."""

    @abstractmethod
    async def keys(self, table: str) -> list[str]:
        """The keys of a table (without reading the records)."""

    def close(self) -> None:  # noqa: B027 - optional for stores holding nothing open
        """Release what the store holds open."""


class MemoryStore(Store):
    def __init__(self) -> None:
        self._tables: dict[str, dict[str, bytes]] = {}

    async def put(self, table: str, key: str, value: bytes) -> None:
        self._tables.setdefault(table, {})[key] = bytes(value)

    async def delete(self, table: str, key: str) -> None:
        self._tables.get(table, {}).pop(key, None)

    async def load(self, table: str) -> dict[str, bytes]:
        return dict(self._tables.get(table, {}))

    async def get(self, table: str, key: str) -> bytes | None:
        return self._tables.get(table, {}).get(key)

    async def keys(self, table: str) -> list[str]:
        return list(self._tables.get(table, {}))


class SqliteStore(Store):
    """One SQLite file; one connection, on one thread: calls run in the order they were
    made (two writes of one record land in that order)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="raygang-sqlite")
        self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        with self._lock:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.execute(
                "CREATE TABLE IF NOT EXISTS records (tbl TEXT NOT NULL, key TEXT NOT NULL, "
                "value BLOB NOT NULL, PRIMARY KEY (tbl, key))")

    def _execute(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    async def _run(self, sql: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, self._execute, sql, args)

    async def put(self, table: str, key: str, value: bytes) -> None:
        await self._run("INSERT OR REPLACE INTO records (tbl, key, value) VALUES (?, ?, ?)",
                        (table, key, bytes(value)))

    async def delete(self, table: str, key: str) -> None:
        await self._run("DELETE FROM records WHERE tbl = ? AND key = ?", (table, key))

    async def load(self, table: str) -> dict[str, bytes]:
        rows = await self._run("SELECT key, value FROM records WHERE tbl = ?", (table,))
        return {key: bytes(value) for key, value in rows}

    async def get(self, table: str, key: str) -> bytes | None:
        rows = await self._run("SELECT value FROM records WHERE tbl = ? AND key = ?",
                               (table, key))
        return bytes(rows[0][0]) if rows else None

    async def keys(self, table: str) -> list[str]:
        return [key for (key,) in await self._run("SELECT key FROM records WHERE tbl = ?",
                                                  (table,))]

    def close(self) -> None:
        self._thread.shutdown(wait=True)
        with self._lock:
            self._db.close()
