"""Keys a cycle looks up often, hashed once."""

from __future__ import annotations

from collections.abc import Iterable


class HashedTuple(tuple):  # type: ignore[type-arg]
    """A tuple whose hash is worked out once: the plain tuple's, so that the two mix as
    keys (equal, and hashed alike)."""

    _hash: int

    def __new__(cls, items: Iterable[object]) -> HashedTuple:
        self = super().__new__(cls, items)
        self._hash = tuple.__hash__(self)
        return self

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple[type[HashedTuple], tuple[tuple[object, ...]]]:
        # Hashed anew where it is read back: a string's hash differs between processes
        return (HashedTuple, (tuple(self),))


# Equal keys as one object: a line's runs (`backlog.run_starts`) compare their gangs'
# shapes in C, where equal objects that are not the same one cost a call per bundle. Kept
# for the process (shapes are few; emptied past a bound, which costs only longer runs
# being seen as shorter ones, never a wrong answer).
_ONE: dict[HashedTuple, HashedTuple] = {}
_ONE_BOUND = 100_000


def one_of(key: HashedTuple) -> HashedTuple:
    """The object kept for keys equal to `key` (it, the first time)."""
    if len(_ONE) >= _ONE_BOUND:
        _ONE.clear()
    return _ONE.setdefault(key, key)
