"""Idempotency keys: a retried submission gets the first one's gang, never a second gang.

As Stripe's API and Kubernetes' `metadata.name` do it: the client picks a key per logical
submission; the first request with it creates the gang, every retry returns that gang's id,
and reusing the key for a different submission is a conflict, not a silent replacement.
Keys are remembered for `ttl_s` (a day, as Stripe) and at most `max_keys` of them.
"""

from __future__ import annotations

import collections
import hashlib
import json
from collections.abc import Callable

from raygang.control.errors import IdempotencyConflictError
from raygang.control.program import RoleProgram
from raygang.core.spec import GangSpec

TTL_S = 24 * 3600.0
MAX_KEYS = 100_000


class IdempotencyKeys:
    def __init__(self, ttl_s: float = TTL_S, max_keys: int = MAX_KEYS):
        self._ttl_s = ttl_s
        self._max_keys = max_keys
        # key -> (gang id, fingerprint of the submission, when first seen); oldest first
        self._seen: collections.OrderedDict[str, tuple[str, str, float]] = (
            collections.OrderedDict()
        )

    def submit(self, key: str, fingerprint: str, now: float, create: Callable[[], str]) -> str:
        """The gang id for `key`: the remembered one, or `create()`'s (remembered only if
        `create` succeeds, so a rejected submission may be retried once fixed)."""
        self._expire(now)
        seen = self._seen.get(key)
        if seen is not None:
            gang_id, first, _ = seen
            if first != fingerprint:
                raise IdempotencyConflictError(
                    f"Idempotency-Key {key.split(':', 1)[-1]!r} was used for a different "
                    f"submission (gang {gang_id}); use a new key for a new gang"
                )
            return gang_id
        gang_id = create()
        self._seen[key] = (gang_id, fingerprint, now)
        while len(self._seen) > self._max_keys:
            self._seen.popitem(last=False)
        return gang_id

    def remember(self, key: str, fingerprint: str, gang_id: str, at: float) -> None:
        """Restore a key read back from the store (after a restart), in submission order."""
        self._seen[key] = (gang_id, fingerprint, at)

    def forget(self, key: str) -> None:
        """Drop a key whose submission was not stored after all (it may be retried)."""
        self._seen.pop(key, None)

    def _expire(self, now: float) -> None:
        while self._seen:
            _, (_, _, at) = next(iter(self._seen.items()))
            if now - at < self._ttl_s:
                return
            self._seen.popitem(last=False)


def submission_fingerprint(spec: GangSpec, programs: dict[str, RoleProgram]) -> str:
    """What makes two submissions the same one (for idempotency keys)."""
    described = {
        name: [p.display, repr(p.args), repr(sorted(p.kwargs.items())), repr(p.runtime_env)]
        for name, p in sorted(programs.items())
    }
    text = json.dumps([spec.model_dump(mode="json"), described], sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()
