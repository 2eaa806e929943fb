"""The store contract, for the stores that need no Ray (GcsStore: tests/integration)."""

from __future__ import annotations

import asyncio

import pytest

from raygang.control.store import MemoryStore, SqliteStore, Store


def contract(store: Store) -> None:
    async def go() -> None:
        assert await store.load("gangs") == {}
        await store.put("gangs", "a-1", b"one")
        await store.put("gangs", "b/2", b"\x00two")  # any key, any bytes
        await store.put("queues", "a-1", b"other table")
        await store.put("gangs", "a-1", b"one, again")  # replaces
        assert await store.load("gangs") == {"a-1": b"one, again", "b/2": b"\x00two"}
        await store.delete("gangs", "a-1")
        await store.delete("gangs", "never-there")
        assert await store.load("gangs") == {"b/2": b"\x00two"}
        assert await store.load("queues") == {"a-1": b"other table"}
        assert await store.get("gangs", "b/2") == b"\x00two"
        assert await store.get("gangs", "a-1") is None
        assert sorted(await store.keys("gangs")) == ["b/2"]
        assert await store.keys("nothing") == []

    asyncio.run(go())


def test_memory_store():
    contract(MemoryStore())


def test_sqlite_store_survives_reopening(tmp_path):
    path = tmp_path / "state" / "raygang.db"
    store = SqliteStore(path)
    contract(store)
    store.close()
    again = SqliteStore(path)  # another process after a restart opens the same file
    assert asyncio.run(again.load("gangs")) == {"b/2": b"\x00two"}
    again.close()


def test_sqlite_writes_from_many_tasks_at_once(tmp_path):
    store = SqliteStore(tmp_path / "db")

    async def go() -> dict[str, bytes]:
        await asyncio.gather(*(store.put("t", str(i), b"%d" % i) for i in range(200)))
        return await store.load("t")

    assert asyncio.run(go()) == {str(i): b"%d" % i for i in range(200)}
    store.close()


@pytest.mark.parametrize("table", ["a/b"])
def test_gcs_table_names_cannot_hold_a_slash(table):
    from raygang.runtime.scheduler.gcs_store import GcsStore

    with pytest.raises(ValueError, match="contains '/'"):
        GcsStore._key(table, "k")
