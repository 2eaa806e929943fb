"""KAI Scheduler's rules, as raygang's own cycle with other actions (`decide`).

raygang's core follows KAI's model (DESIGN.md): queues with a guaranteed quota and an
over-quota weight, fair shares water-filled top-down (quota first, the rest by weight:
KAI's "deserved quota" and "over-quota weight", docs/fairness), pending jobs taken from
the queue furthest below its fair share (DRF), inside a queue by priority then creation,
and the actions allocate -> reclaim -> preempt. So the KAI-style baseline is the core's
cycle with the one rule where raygang chose differently, given as configuration (`ACTIONS`:
reclaim with another protection, `core.actions.reclaim.protecting("quota")`):

- Reclaim. KAI reclaims for a queue below its deserved quota from queues above theirs,
  and protects what a queue runs within its deserved quota only: "a sibling reclaims
  another user's above-quota GPUs but never their guaranteed quota", and cross-queue
  reclaim recovers a queue's deserved quota, not its fair share (KAI-Scheduler
  discussion #1763, GuaranteeDeservedQuota). raygang also protects what a queue runs
  within its fair share (`core.preemption.victims.reclaim_protected`), so it takes less
  from queues that borrowed while others were idle. Here reclaim may take what a queue
  runs beyond its quota (walked most important first, as raygang walks them), from any
  of its gangs (by amount, as raygang takes it: `core.preemption.excess`).

Time-based fair share (`kai-tbf`, `TimeBasedFairShare`): KAI's proportion plugin divides
the capacity beyond deserved quotas among queues by a share weight that falls with each
queue's past usage (docs/time-based-fairshare; `calcShareWeights` in
pkg/scheduler/plugins/proportion/resource_division): max(0, w + k (w - u)), w the queue's
over-quota weight normalized over the queues that want more, u its GPU usage over the
window (168 h sliding by default; optionally decayed with a half-life) normalized to the
cluster's capacity over the same time, k the `kValue`. KAI's default kValue is not in its
docs; the docs' example, 0.5, is used. Deserved quotas are unchanged ("this does not
affect in-quota allocation"). Modelled from the replay's own allocations (KAI reads them
from Prometheus), cycle by cycle; the weights are re-derived over the queues that hold or
want GPUs, not per round of the water-filling.

Not modelled: its queue order among victims (the queue furthest over its fair share first;
here the core's victim order: lowest priority, most recently started, smallest), elastic
jobs.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from raygang.core.actions import ACTIONS as CORE_ACTIONS
from raygang.core.actions import reclaim
from raygang.core.backlog import Backlog
from raygang.core.config import PolicyConfig
from raygang.core.cycle import Cycle
from raygang.core.plan import Plan
from raygang.core.snapshot import ClusterSnapshot


# KAI's minruntime plugin defaults to 0 s for reclaim and preempt (docs/plugins/minruntime.md:
# "0s means workloads are instantly reclaimable/preemptible"), and its preemptionDelay is
# unset by default (v0.17); victims as raygang took them before its own policy changed
# (most recently started first), so the baseline stays as measured.
PREEMPTION = {"reclaim_min_runtime_s": 0.0, "preempt_min_runtime_s": 0.0,
              "reclaim_delay_s": 0.0, "preempt_delay_s": 0.0, "reclaim_victim_order": "newest"}


# raygang's actions with KAI's reclaim protection: configuration, not a cycle of its own.
ACTIONS = {**CORE_ACTIONS, "reclaim": reclaim.protecting("quota")}


def decide(snapshot: ClusterSnapshot, backlog: Backlog, config: PolicyConfig,
           now: float) -> Plan:
    return Cycle(snapshot, config, now, ACTIONS).run(backlog)


@dataclass(frozen=True)
class TimeBasedFairShare:
    """KAI's usage parameters (`usageDBConfig.usageParams`, `kValue`)."""

    k_value: float = 0.5
    window_s: float = 168 * 3600.0  # windowSize 168h, sliding
    half_life_s: float | None = None  # halfLifePeriod: off by default


class WithUsage:
    """`decide` with KAI's time-based fair share: a fresh one per replay (it keeps the
    replay's usage history). Each call adds the interval since the last call, with the GPUs
    each queue held in the last snapshot, to a sliding window of per-queue GPU-seconds and
    of capacity GPU-seconds (each decayed by the half-life, if any)."""

    def __init__(self, tbf: TimeBasedFairShare = TimeBasedFairShare()):
        self.tbf = tbf
        self._last: tuple[float, dict[str, float], float] | None = None  # (t, held, cap)
        self._window: deque[tuple[float, dict[str, float], float]] = deque()  # (t, used, cap)
        self._used: dict[str, float] = {}  # sums over the window, decayed to `_at`
        self._cap = 0.0
        self._at = 0.0
        self._configs: dict[tuple, PolicyConfig] = {}

    def __call__(self, snapshot: ClusterSnapshot, backlog: Backlog, config: PolicyConfig,
                 now: float) -> Plan:
        self.record(snapshot, now)
        return Cycle(snapshot, self.adjusted(config, backlog, snapshot), now,
                     ACTIONS).run(backlog)

    def record(self, snapshot: ClusterSnapshot, now: float) -> None:
        held: dict[str, float] = {}
        for gang in snapshot.placed:
            held[gang.queue] = held.get(gang.queue, 0.0) + gang.total.get("GPU")
        cap = sum(n.total.get("GPU") for n in snapshot.alive_nodes)
        if self._last is not None and now > self._last[0]:
            t, was, was_cap = self._last
            seconds = now - t
            self._decay_to(now)
            used = {q: g * seconds for q, g in was.items()}
            self._window.append((now, used, was_cap * seconds))
            for q, v in used.items():
                self._used[q] = self._used.get(q, 0.0) + v
            self._cap += was_cap * seconds
            while self._window and self._window[0][0] < now - self.tbf.window_s:
                t_old, old, old_cap = self._window.popleft()
                factor = self._factor(now - t_old)
                for q, v in old.items():
                    self._used[q] -= v * factor
                self._cap -= old_cap * factor
        self._last = (now, held, cap)

    def _factor(self, age: float) -> float:
        half = self.tbf.half_life_s
        return 1.0 if not half else 0.5 ** (age / half)

    def _decay_to(self, now: float) -> None:
        factor = self._factor(now - self._at)
        if factor != 1.0:
            self._used = {q: v * factor for q, v in self._used.items()}
            self._cap *= factor
        self._at = now

    def usage(self) -> dict[str, float]:
        """Each queue's normalized usage: its GPU-seconds over the cluster's."""
        return {q: v / self._cap for q, v in self._used.items()} if self._cap > 0 else {}

    def adjusted(self, config: PolicyConfig, backlog: Backlog,
                 snapshot: ClusterSnapshot) -> PolicyConfig:
        """`config` with each queue's weight the share weight KAI would give it."""
        k, usage = self.tbf.k_value, self.usage()
        wanting = set(backlog.lines) | {g.queue for g in snapshot.placed}
        specs = [q for q in config.queues if q.name in wanting]
        total = sum(q.weight for q in specs)
        if not total or not usage:
            return config
        weights = {}
        for q in specs:
            w = q.weight / total
            # Floored at 0 by KAI; a weight here must be positive: a hair above.
            weights[q.name] = round(max(1e-6, w + k * (w - usage.get(q.name, 0.0))), 3)
        key = tuple(sorted(weights.items()))
        found = self._configs.get(key)
        if found is None:
            if len(self._configs) > 4096:
                self._configs.clear()
            data = config.model_dump()
            for q in data["queues"]:
                q["weight"] = weights.get(q["name"], q["weight"])
            found = self._configs[key] = type(config).model_validate(data)  # a new tree
        return found
