"""Resource vectors: `{"CPU": 2, "GPU": 1, "memory": 8e9, "TPU": 4}`.

Amounts are kept as integers in Ray's own fixed-point unit (1/10,000), so sums and
differences are exact and a bundle that Ray would accept is never rejected here by a
rounding error. Zero amounts are dropped: `{"GPU": 0}` equals `{}`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

UNIT = 10_000  # Ray's resource granularity (ray::kResourceUnitScaling).
# Ray keeps resource amounts as fixed-point int64 in units of 1/10,000: about 9.2e14 at most.
MAX_AMOUNT = 9e14

# Order in which resources are compared for best fit and shown in messages: the scarce,
# expensive ones first. Resources not listed here (custom ones) come after GPU.
_FIRST = ("GPU",)
_LAST = ("CPU", "memory", "object_store_memory")


def scarcity_key(name: str) -> tuple[int, str]:
    """Sort key putting GPU first, custom resources next, then CPU and memory."""
    if name in _FIRST:
        return (0, name)
    if name in _LAST:
        return (2 + _LAST.index(name), name)
    return (1, name)


def format_amount(name: str, amount: float) -> str:
    if name in ("memory", "object_store_memory"):
        return f"{amount / 2**30:.3g} GiB"
    return f"{amount:g}"


class Resources(Mapping[str, float]):
    """An immutable, hashable vector of resource amounts."""

    __slots__ = ("_units", "_hash")

    def __init__(self, amounts: Mapping[str, float] | None = None, /, **kwargs: float):
        self._hash: int | None = None
        if not amounts and not kwargs:  # `Resources()`: the start of many sums
            self._units: dict[str, int] = {}
            return
        units: dict[str, int] = {}
        for source in (amounts or {}, kwargs):
            for name, amount in source.items():
                units[name] = _to_units(name, amount)
        self._units = {k: v for k, v in units.items() if v}

    @classmethod
    def signed(cls, amounts: Mapping[str, float]) -> Resources:
        """Like the constructor, but a negative amount is kept: a difference read back
        from a file (a node's free is negative where it is booked beyond its total)."""
        units = {}
        for name, amount in amounts.items():
            sign = -1 if isinstance(amount, (int, float)) and amount < 0 else 1
            units[name] = sign * _to_units(name, sign * amount)
        return cls._of_units(units)

    @classmethod
    def _of_units(cls, units: dict[str, int]) -> Resources:
        """A vector that takes `units` over (the callers build it fresh): zeros dropped."""
        self = object.__new__(cls)
        # Most vectors hold no zero: look before building another dict (the core makes
        # millions of these per cycle-heavy replay).
        self._units = {k: v for k, v in units.items() if v} if 0 in units.values() else units
        self._hash = None
        return self

    # Mapping protocol ---------------------------------------------------------------
    def __getitem__(self, name: str) -> float:
        return self._units[name] / UNIT

    def get(self, name: str, default: float = 0.0) -> float:  # type: ignore[override]
        units = self._units.get(name)
        return default if units is None else units / UNIT

    def __iter__(self) -> Iterator[str]:
        return iter(self._units)

    def __len__(self) -> int:
        return len(self._units)

    def __contains__(self, name: object) -> bool:
        return name in self._units

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Resources):
            return self._units == other._units
        if isinstance(other, Mapping):
            try:
                return self == Resources(other)
            except ValueError:  # not a resource vector, so not equal
                return False
        return NotImplemented

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._units.items()))
        return self._hash

    # Arithmetic -----------------------------------------------------------------------
    def __add__(self, other: Resources) -> Resources:
        units = dict(self._units)
        for name, value in other._units.items():
            units[name] = units.get(name, 0) + value
        return Resources._of_units(units)

    def __sub__(self, other: Resources) -> Resources:
        """Difference; may hold negative amounts (a shortfall), see `is_nonnegative`."""
        units = dict(self._units)
        for name, value in other._units.items():
            units[name] = units.get(name, 0) - value
        return Resources._of_units(units)

    def __mul__(self, factor: int) -> Resources:
        if not isinstance(factor, int):
            return NotImplemented
        return Resources._of_units({k: v * factor for k, v in self._units.items()})

    __rmul__ = __mul__

    @classmethod
    def sum(cls, vectors: Iterable[Resources]) -> Resources:
        """The sum of `vectors`, built once (not one vector per addition)."""
        units: dict[str, int] = {}
        get = units.get  # (a cycle sums every running gang, by queue)
        for vector in vectors:
            for name, value in vector._units.items():
                units[name] = get(name, 0) + value
        return cls._of_units(units)

    @classmethod
    def sum_times(cls, pairs: Iterable[tuple[Resources, int]]) -> Resources:
        """The sum of each vector times its count, built once (a queue's demand from the
        distinct totals its gangs ask for, each cycle)."""
        units: dict[str, int] = {}
        get = units.get
        for vector, count in pairs:
            for name, value in vector._units.items():
                units[name] = get(name, 0) + value * count
        return cls._of_units(units)

    def fits_in(self, capacity: Resources) -> bool:
        """True when every amount here is available in `capacity`."""
        cap = capacity._units
        for name, value in self._units.items():  # a loop, not all(...): called millions
            if cap.get(name, 0) < value:        # of times a replay
                return False
        return True

    def __le__(self, other: Resources) -> bool:
        return self.fits_in(other)

    def __ge__(self, other: Resources) -> bool:
        return other.fits_in(self)

    def is_nonnegative(self) -> bool:
        return all(v >= 0 for v in self._units.values())

    def minimum(self, other: Resources) -> Resources:
        """Per-resource minimum (a resource missing on either side counts as 0, so a
        shortfall on the other side is kept: 0 free and 4 over-booked is -4)."""
        mine, theirs = self._units, other._units
        return Resources._of_units(
            {k: min(mine.get(k, 0), theirs.get(k, 0)) for k in mine.keys() | theirs.keys()}
        )

    def maximum(self, other: Resources) -> Resources:
        """Per-resource maximum (a resource missing on either side counts as 0)."""
        mine, theirs = self._units, other._units
        return Resources._of_units(
            {k: max(mine.get(k, 0), theirs.get(k, 0)) for k in mine.keys() | theirs.keys()}
        )

    def positive(self) -> Resources:
        """Only the positive amounts (a node booked beyond its total has none free)."""
        if not self._units or min(self._units.values()) > 0:
            return self  # the common case: nothing to drop (immutable, so itself)
        return Resources._of_units({k: v for k, v in self._units.items() if v > 0})

    def shortfall(self, capacity: Resources) -> Resources:
        """What `capacity` lacks to hold this vector (only the missing amounts)."""
        cap = capacity._units
        return Resources._of_units(
            {k: v - cap.get(k, 0) for k, v in self._units.items() if v > cap.get(k, 0)}
        )

    def only(self, names: set[str] | frozenset[str]) -> Resources:
        if names.issuperset(self._units):  # all of it: the vector itself (immutable)
            return self
        return Resources._of_units({k: v for k, v in self._units.items() if k in names})

    def units(self, name: str) -> int:
        return self._units.get(name, 0)

    def vector(self, names: tuple[str, ...]) -> tuple[int, ...]:
        """Amounts in units for `names`, in that order (0 for names not here)."""
        units = self._units
        return tuple([units.get(n, 0) for n in names])

    def names_by_scarcity(self) -> list[str]:
        return sorted(self._units, key=scarcity_key)

    def to_dict(self) -> dict[str, float]:
        return {k: v / UNIT for k, v in self._units.items()}

    def __repr__(self) -> str:
        return f"Resources({self.to_dict()!r})"

    def __str__(self) -> str:
        items = ", ".join(
            f"{name}: {format_amount(name, self[name])}" for name in self.names_by_scarcity()
        )
        return "{" + items + "}"

    # pydantic integration: validated from a mapping, serialized as a plain dict ----------
    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any,
                                     handler: GetCoreSchemaHandler) -> core_schema.CoreSchema:
        from_mapping = core_schema.no_info_plain_validator_function(_validate_resources)
        as_dict = core_schema.dict_schema(core_schema.str_schema(), core_schema.float_schema())
        return core_schema.json_or_python_schema(
            json_schema=core_schema.chain_schema([as_dict, from_mapping]),
            python_schema=from_mapping,
            # return_schema: the JSON schema in serialization mode (FastAPI response models).
            serialization=core_schema.plain_serializer_function_ser_schema(
                lambda r: r.to_dict(), return_schema=as_dict
            ),
        )


class Sums:
    """Sums kept from one cycle to the next, by name: a cycle sums what every running gang
    holds per queue and every node's capacity, and from one cycle to the next most of
    those lists hold the same vectors (the control plane hands a cycle the same objects
    while they do not change). A list of the very same vectors, in the same order, as
    the last one summed under its name has the same sum (vectors are immutable); any
    other is summed anew. One per use; safe to share between threads (an entry is one
    tuple, replaced whole)."""

    def __init__(self) -> None:
        self._last: dict[str, tuple[list[Resources], Resources]] = {}

    def of(self, name: str, vectors: list[Resources]) -> Resources:
        last = self._last.get(name)
        if last is not None and len(last[0]) == len(vectors) and all(
                map(operator.is_, last[0], vectors)):
            return last[1]
        total = Resources.sum(vectors)
        self._last[name] = (vectors, total)
        return total


def per_node(bundles: Iterable[tuple[str, Resources]]) -> dict[str, Resources]:
    """What (node, bundle) pairs ask of each node, summed."""
    need: dict[str, Resources] = {}
    for node, bundle in bundles:
        need[node] = need[node] + bundle if node in need else bundle
    return need


def _to_units(name: object, amount: object) -> int:
    if not isinstance(name, str) or not name:
        raise ValueError(f"resource names must be non-empty strings, got {name!r}")
    if isinstance(amount, bool) or not isinstance(amount, (int, float)):
        raise ValueError(f"resource {name!r} must be a number, got {amount!r}")
    if not math.isfinite(amount):
        raise ValueError(f"resource {name!r} must be finite, got {amount!r}")
    if amount < 0:
        raise ValueError(f"resource {name!r} must be >= 0, got {amount:g}")
    if amount > MAX_AMOUNT:
        raise ValueError(f"resource {name!r} must be at most {MAX_AMOUNT:g} (what Ray can "
                         f"represent), got {amount:g}")
    return round(amount * UNIT)


def _validate_resources(value: Any) -> Resources:
    if isinstance(value, Resources):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(
            f"expected a mapping of resource name to amount such as "
            f'{{"CPU": 1, "GPU": 1}}, got {type(value).__name__}'
        )
    return Resources(value)


ZERO = Resources()
