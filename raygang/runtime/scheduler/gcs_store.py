"""The default store: Ray's GCS key-value store (see `control/store.py` for the contract).

Calls are the GCS client's async ones, so the scheduler's event loop never blocks on them.
"""

from __future__ import annotations

from raygang.control.store import Store
from raygang.runtime.names import GCS_NAMESPACE
from raygang.runtime.ray_private import gcs_kv_client



class GcsStore(Store):
    """Ray's GCS key-value store; keys are `<table>/<key>` in namespace `namespace`."""

    def __init__(self, namespace: str = GCS_NAMESPACE, timeout_s: float = 30.0):
        self._client = gcs_kv_client()
        self._namespace = namespace.encode()
        self._timeout = timeout_s

    @staticmethod
    def _key(table: str, key: str) -> bytes:
        if "/" in table:
            raise ValueError(f"table name {table!r} contains '/'")
        return f"{table}/{key}".encode()

    async def put(self, table: str, key: str, value: bytes) -> None:
        await self._client.async_internal_kv_put(
            self._key(table, key), value, True, namespace=self._namespace,
            timeout=self._timeout)

    async def delete(self, table: str, key: str) -> None:
        await self._client.async_internal_kv_del(
            self._key(table, key), False, namespace=self._namespace, timeout=self._timeout)

    async def get(self, table: str, key: str) -> bytes | None:
        return await self._client.async_internal_kv_get(
            self._key(table, key), namespace=self._namespace, timeout=self._timeout)

    async def keys(self, table: str) -> list[str]:
        prefix = self._key(table, "")
        keys = await self._client.async_internal_kv_keys(
            prefix, namespace=self._namespace, timeout=self._timeout)
        return [k[len(prefix):].decode() for k in keys]

    async def load(self, table: str) -> dict[str, bytes]:
        prefix = self._key(table, "")
        keys = await self._client.async_internal_kv_keys(
            prefix, namespace=self._namespace, timeout=self._timeout)
        if not keys:
            return {}
        values = await self._client.async_internal_kv_multi_get(
            keys, namespace=self._namespace, timeout=self._timeout)
        return {k[len(prefix):].decode(): v for k, v in values.items() if v is not None}


async def gcs_reachable(timeout_s: float) -> bool:
    """Whether the GCS answers a key read within `timeout_s` (`RayCluster.answers`, asked
    by control/sight.py): with GCS fault tolerance the workers outlive a GCS restart, and
    this is what says it is down meanwhile. Never raises."""
    try:
        await gcs_kv_client().async_internal_kv_get(
            b"probe", namespace=GCS_NAMESPACE.encode(), timeout=timeout_s)
    except Exception:  # a timeout, a refused connection, a client in a bad state: not
        return False  # reachable, whatever the cause
    return True
