"""Time-based fair share: what each queue used lately, and how that moves its share.

Fair share alone looks at one instant: a team that ran the whole cluster all week and a
team that ran nothing get the same share of the capacity left over after quotas. Two
schedulers remember. Both rules are here, one mechanism (`UsagePolicy`, off unless
configured):

- KAI Scheduler's time-based fair share (docs/time-based-fairshare; the proportion plugin's
  `calcShareWeights`): a queue's usage over a window (`window_s`, sliding; each second of
  it decayed by a half-life, `half_life_s`, when one is set), normalized to the cluster's
  capacity over the same time, is u. The capacity beyond quotas is divided between the
  siblings that want more by the share weight max(0, w + k (w - u)) instead of by w, their
  weight normalized over those siblings (k: `k_value`), round by round, as KAI does. Quotas
  are untouched ("deserved quota still takes precedence"). A lower fair share orders the
  queue later and makes more of what it borrowed reclaimable.
- Kueue's admission fair sharing (docs/concepts/admission_fair_sharing;
  `usageHalfLifeTime`, entry penalty, `resourceWeights`): usage decays with a half-life,
  and each admitted gang is charged at once (`admission_penalty_s` seconds of its
  resources), so that a burst of admissions counts before its run time does. Between
  sibling queues that are at or above their fair share (those competing for the surplus),
  the one that used less over the window, relative to its fair share, goes first; below
  it, the one furthest below still goes first, and usage only breaks ties (two queues
  holding nothing now) (`order_by_usage`); `resource_weights` weigh the resources in that
  comparison (KAI: "all else being equal, queues with higher past usage will get to run
  jobs after queues with lower usage").

Usage lives in a `UsageLedger` the control loop keeps (and stores: it must survive a
restart of the scheduler). Each cycle gets a `UsageView` of it in its snapshot; the core
never changes the ledger, and a cycle's own admissions are charged on a copy.

Where this differs from KAI: KAI normalizes a child queue's usage to the whole cluster
while its weight is normalized over its siblings; here a child's usage is normalized to
the pool its siblings divide (its parent's fair share), so that the two compare at every
level of the tree. KAI rounds each round's shares down to whole units; this does not.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from raygang.core.resources import Resources

WINDOW_BUCKETS = 168  # the window is kept in this many slices (an hour each for a week)
LEDGER_FORMAT = 1
Amounts = dict[str, float]  # resource -> resource-seconds (or resources)


class UsagePolicy(BaseModel):
    """Time-based fair share (`core.usage`): how far what a queue used lately lowers its
    share of the capacity beyond quotas, and its place in line."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    enabled: bool = Field(
        False, description="remember each queue's usage and let it move fair shares and the "
        "order between queues (KAI Scheduler's time-based fair share, Kueue's admission "
        "fair sharing)")
    window_s: float = Field(
        7 * 86400.0, gt=0, description="how far back usage counts (a sliding window; KAI's "
        "windowSize, one week by default)")
    half_life_s: float | None = Field(
        None, gt=0, description="usage this long ago counts half (KAI's halfLifePeriod, "
        "Kueue's usageHalfLifeTime); null: every second in the window counts the same")
    k_value: float = Field(
        0.5, ge=0, description="how strongly usage lowers a queue's share of the capacity "
        "beyond quotas: share weight max(0, w + k (w - u)) (KAI's kValue; 0: not at all)")
    admission_penalty_s: float = Field(
        300.0, ge=0, description="each admitted gang is charged this many seconds of its "
        "resources at once, so a burst counts before its run time does (Kueue's entry "
        "penalty, one usageSamplingInterval of 5 min)")
    order_by_usage: bool = Field(
        True, description="between sibling queues at or above their fair share, the one "
        "that used less over the window (relative to its fair share) goes first, and "
        "between queues equally far below it too (Kueue's admission fair sharing); "
        "otherwise only the current share orders queues")
    resource_weights: dict[str, float] = Field(
        default_factory=dict, description="how much each resource counts when queues are "
        "ordered by usage (Kueue's resourceWeights); empty: the dominant resource, as fair "
        "share compares queues")

    @field_validator("resource_weights")
    @classmethod
    def _some_weight(cls, value: dict[str, float]) -> dict[str, float]:
        for name, weight in value.items():
            if not math.isfinite(weight) or weight < 0:
                raise ValueError(f"{name}: a resource weight is a number >= 0, got {weight}")
        if value and not any(value.values()):
            raise ValueError("every resource weight is 0: nothing would count; leave "
                             "resource_weights empty to compare the dominant resource")
        return value

    @property
    def bucket_s(self) -> float:
        return self.window_s / WINDOW_BUCKETS

    def decay(self, seconds: float) -> float:
        """What one resource-second counts `seconds` later (1 without a half-life)."""
        if self.half_life_s is None or seconds <= 0:
            return 1.0
        return float(0.5 ** (seconds / self.half_life_s))

    def integral(self, seconds: float) -> float:
        """Resource-seconds that one resource held for `seconds` counts at their end."""
        if self.half_life_s is None or seconds <= 0:
            return max(seconds, 0.0)
        return self.half_life_s / math.log(2) * (1.0 - self.decay(seconds))


@dataclass(frozen=True)
class UsageView:
    """The ledger as one cycle reads it: per leaf queue, its resource-seconds over the
    window (decayed), and the cluster's capacity over the same time."""

    used: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    capacity: Mapping[str, float] = field(default_factory=dict)

    def fraction(self, queue: str, res: str) -> float:
        """u: the queue's usage of `res` over the window, as a share of the cluster's."""
        cap = self.capacity.get(res, 0.0)
        return self.used.get(queue, {}).get(res, 0.0) / cap if cap > 0 else 0.0


class TimeShare:
    """One cycle's use of the view: each queue's usage (a parent's is its leaves' sum),
    with this cycle's admissions charged on top (undone with them)."""

    def __init__(self, policy: UsagePolicy, view: UsageView,
                 paths: Mapping[str, tuple[str, ...]]):
        self.policy = policy
        self.capacity = view.capacity
        self.used: dict[str, Amounts] = {name: {} for name in paths}
        self.paths = paths
        for queue, amounts in view.used.items():
            for name in paths.get(queue, ()):  # a queue since removed counts nowhere
                _add(self.used[name], amounts, 1.0)

    def amount(self, queue: str, res: str, cluster: float) -> float:
        """What `queue` held of `res` on average over the window, in today's units: its
        share of the cluster's capacity then, times the cluster's capacity now."""
        cap = self.capacity.get(res, 0.0)
        return self.used[queue].get(res, 0.0) / cap * cluster if cap > 0 else 0.0

    def charge(self, queue: str, amount: Resources) -> Callable[[], object]:
        """Charge an admission to `queue` and its parents; returns the undo."""
        seconds = self.policy.admission_penalty_s
        for name in self.paths.get(queue, ()):
            _add(self.used[name], amount, seconds)
        return lambda: self._refund(queue, amount, seconds)

    def _refund(self, queue: str, amount: Resources, seconds: float) -> None:
        for name in self.paths.get(queue, ()):
            _subtract(self.used[name], amount, seconds)

    def ratio(self, queue: str, fair: Mapping[str, float], cluster: Resources) -> float:
        """Usage over the window relative to the fair share now: the dominant resource's,
        or the `resource_weights`' weighted mean."""
        weights = self.policy.resource_weights
        names = weights or self.used[queue]
        ratios: dict[str, float] = {}
        for res in names:
            held = self.amount(queue, res, cluster.get(res))
            share = fair.get(res, 0.0)
            ratios[res] = held / share if share > 0 else (math.inf if held > 0 else 0.0)
        if not weights:
            return max(ratios.values(), default=0.0)
        return sum(w * ratios[r] for r, w in weights.items() if w) / sum(weights.values())


def time_share(policy: UsagePolicy, view: UsageView | None,
               paths: Mapping[str, tuple[str, ...]]) -> TimeShare | None:
    """The cycle's `TimeShare`, or None where usage moves nothing (off, or none known)."""
    if not policy.enabled or view is None:
        return None
    return TimeShare(policy, view, paths)


def share_weights(weights: list[float], usage: list[float], k_value: float) -> list[float]:
    """KAI's share weights of claimants of weights `weights` (normalized here) and usage
    `usage` (a share of the pool): max(0, w + k (w - u)); the plain weights if every one
    comes out 0 (each used far more than the pool)."""
    total = sum(weights)
    shares = [max(0.0, w / total + k_value * (w / total - u)) for w, u in zip(weights, usage)]
    return shares if sum(shares) > 0 else weights


class _Slice:
    """Resource-seconds per queue and of the capacity, over one stretch of time."""

    __slots__ = ("capacity", "end", "start", "used")

    def __init__(self, start: float, end: float, used: dict[str, Amounts] | None = None,
                 capacity: Amounts | None = None):
        self.start, self.end = start, end
        self.used: dict[str, Amounts] = used or {}
        self.capacity: Amounts = capacity or {}

    def scale(self, factor: float) -> None:
        if factor != 1.0:
            for amounts in self.used.values():
                _scale(amounts, factor)
            _scale(self.capacity, factor)

    def data(self) -> dict[str, Any]:
        return {"start": self.start, "end": self.end, "used": self.used,
                "capacity": self.capacity}


class UsageLedger:
    """What each leaf queue held over the window, in decayed resource-seconds.

    `advance(now, held, capacity)` books the time since the last call with what was held
    then, and remembers what is held now for the next call; `charge` adds a penalty.
    The window is kept in `WINDOW_BUCKETS` slices: the open one, decayed to the ledger's
    time, and closed ones, each decayed to its own end (a closed slice never changes, so
    a call costs the queues, not the window). The totals are their decayed sum; a slice
    leaves the window whole once its end is `window_s` old."""

    def __init__(self, policy: UsagePolicy):
        self.policy = policy
        self.at: float | None = None
        self.held: dict[str, Resources] = {}
        self.capacity = Resources()
        self.open: _Slice | None = None
        self.closed: deque[_Slice] = deque()
        self.total = _Slice(0.0, 0.0)  # the window's sum, decayed to `at`

    def advance(self, now: float, held: Mapping[str, Resources], capacity: Resources) -> None:
        if self.at is None or self.open is None:
            self.at, self.open = now, _Slice(now, now)
        elif now > self.at:
            self._book(now)
        self.held = {q: r for q, r in held.items() if r}
        self.capacity = capacity

    def _book(self, now: float) -> None:
        """Book [at, now) with what was held at `at`, slice by slice."""
        assert self.at is not None and self.open is not None
        bucket = self.policy.bucket_s
        earliest = now - self.policy.window_s - bucket  # older than this would leave again
        if self.at < earliest:  # a long gap: only its end can still count
            self._restart(earliest)
        while self.at < now:
            stop = min(now, self.open.start + bucket)
            self._add(stop - self.at, stop)
            if stop >= self.open.start + bucket:
                self.closed.append(self.open)
                self.open = _Slice(stop, stop)
        self._expire()

    def _restart(self, at: float) -> None:
        self.closed.clear()
        self.at, self.open, self.total = at, _Slice(at, at), _Slice(at, at)

    def _add(self, seconds: float, stop: float) -> None:
        """`seconds` more of what is held, up to `stop` (within the open slice)."""
        assert self.open is not None
        factor = self.policy.decay(seconds)
        worth = self.policy.integral(seconds)
        for part in (self.open, self.total):
            part.scale(factor)
            for queue, amount in self.held.items():
                _add(part.used.setdefault(queue, {}), amount, worth)
            _add(part.capacity, self.capacity, worth)
        self.open.end = stop
        self.at = stop

    def _expire(self) -> None:
        """Take out of the totals the closed slices that left the window."""
        assert self.at is not None
        while self.closed and self.closed[0].end <= self.at - self.policy.window_s:
            old = self.closed.popleft()
            factor = self.policy.decay(self.at - old.end)
            for queue, amounts in old.used.items():
                _subtract(self.total.used.setdefault(queue, {}), amounts, factor)
            _subtract(self.total.capacity, old.capacity, factor)
        if not self.closed and self.open is not None:  # nothing else left: exact again
            self.total = _copy(self.open)

    def started(self, queue: str, amount: Resources) -> None:
        """`queue` holds `amount` more from now on (a gang admitted since the last look)."""
        self.held[queue] = self.held.get(queue, Resources()) + amount

    def charge(self, queue: str, amount: Resources, seconds: float) -> None:
        """Count `amount` held for `seconds` now (the admission penalty)."""
        if self.open is None or seconds <= 0 or not amount:
            return
        for part in (self.open, self.total):
            _add(part.used.setdefault(queue, {}), amount, seconds)

    def view(self) -> UsageView:
        """The totals as a cycle reads them (copies: the ledger moves on)."""
        return UsageView({q: dict(a) for q, a in self.total.used.items() if any(a.values())},
                         dict(self.total.capacity))

    # Stored and read back --------------------------------------------------------------
    def data(self) -> dict[str, Any]:
        """JSON-able: what `load` reads back (the totals are summed again from the
        slices, so rounding does not add up over restarts)."""
        return {**self.head(), "closed": [s.data() for s in self.closed]}

    def head(self) -> dict[str, Any]:
        """`data` but the closed slices (which never change: written once each)."""
        return {"format": LEDGER_FORMAT, "at": self.at,
                "held": {q: r.to_dict() for q, r in self.held.items()},
                "capacity": self.capacity.to_dict(),
                "open": None if self.open is None else self.open.data()}

    @classmethod
    def load(cls, policy: UsagePolicy, data: Mapping[str, Any]) -> UsageLedger:
        if data.get("format") != LEDGER_FORMAT:
            raise ValueError(f"usage ledger format {data.get('format')!r}, expected "
                             f"{LEDGER_FORMAT}")
        ledger = cls(policy)
        ledger.at = data["at"]
        ledger.held = {q: Resources(r) for q, r in data["held"].items()}
        ledger.capacity = Resources(data["capacity"])
        if data["open"] is not None:
            ledger.open = _slice(data["open"])
        ledger.closed = deque(_slice(s) for s in data["closed"])
        ledger.total = ledger._summed()
        return ledger

    def _summed(self) -> _Slice:
        at = self.at or 0.0
        total = _Slice(at, at)
        for part in [*self.closed, *([self.open] if self.open else [])]:
            factor = self.policy.decay(at - part.end)
            for queue, amounts in part.used.items():
                _subtract(total.used.setdefault(queue, {}), amounts, -factor)
            _subtract(total.capacity, part.capacity, -factor)
        return total


def _slice(data: Mapping[str, Any]) -> _Slice:
    return _Slice(float(data["start"]), float(data["end"]),
                  {q: {r: float(v) for r, v in a.items()} for q, a in data["used"].items()},
                  {r: float(v) for r, v in data["capacity"].items()})


def _copy(part: _Slice) -> _Slice:
    return _Slice(part.start, part.end, {q: dict(a) for q, a in part.used.items()},
                  dict(part.capacity))


def _scale(amounts: Amounts, factor: float) -> None:
    for res in amounts:
        amounts[res] *= factor


def _add(into: Amounts, amount: Mapping[str, float], seconds: float) -> None:
    for res, value in amount.items():
        into[res] = into.get(res, 0.0) + value * seconds


def _subtract(into: Amounts, amounts: Mapping[str, float], factor: float) -> None:
    """`into` less `amounts` x `factor`, never below 0 (rounding)."""
    for res, value in amounts.items():
        into[res] = max(0.0, into.get(res, 0.0) - value * factor)
