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
