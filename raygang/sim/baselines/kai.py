"""KAI Scheduler's rules, as a variant of raygang's own cycle (`decide`).

raygang's core follows KAI's model (DESIGN.md): queues with a guaranteed quota and an
over-quota weight, fair shares water-filled top-down (quota first, the rest by weight:
KAI's "deserved quota" and "over-quota weight", docs/fairness), pending jobs taken from
the queue furthest below its fair share (DRF), inside a queue by priority then creation,
and the actions allocate -> reclaim -> preempt. So the KAI-style baseline is the core's
cycle with the one rule where raygang chose differently:

- Reclaim. KAI reclaims for a queue below its deserved quota from queues above theirs,
  and protects what a queue runs within its deserved quota only: "a sibling reclaims
  another user's above-quota GPUs but never their guaranteed quota", and cross-queue
  reclaim recovers a queue's deserved quota, not its fair share (KAI-Scheduler
  discussion #1763, GuaranteeDeservedQuota). raygang also protects what a queue runs
  within its fair share (`core.victims.reclaim_protected`), so it takes less from queues
  that borrowed while others were idle. Here reclaim may take any gang a queue runs
  beyond its quota (walked most important first, as raygang walks them).

Not modelled: KAI's time-based fair share (shares adjusted by past usage, v0.10), its
queue order among victims (the queue furthest over its fair share first; here the
core's victim order: lowest priority, most recently started, smallest), elastic jobs.
"""

from __future__ import annotations

import math

from raygang.core.backlog import Backlog
from raygang.core.config import PolicyConfig
from raygang.core.cycle import Cycle, Narrow
from raygang.core.fairshare import in_quota
from raygang.core.plan import Plan
from raygang.core.pool import Pool
from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot, PlacedGang


# KAI's minruntime plugin defaults to 0 s for reclaim and preempt (docs/plugins/minruntime.md:
# "0s means workloads are instantly reclaimable/preemptible"), and its preemptionDelay is
# unset by default (v0.17); victims as raygang took them before its own policy changed
# (most recently started first), so the baseline stays as measured.
PREEMPTION = {"reclaim_min_runtime_s": 0.0, "preempt_min_runtime_s": 0.0,
              "reclaim_delay_s": 0.0, "preempt_delay_s": 0.0, "reclaim_victim_order": "newest"}


def decide(snapshot: ClusterSnapshot, backlog: Backlog, config: PolicyConfig,
           now: float) -> Plan:
    return _KaiCycle(snapshot, config, now).run(backlog)


class _KaiCycle(Cycle):
    def pool(self, action: str, narrow: Narrow | None = None) -> Pool:
        if action == "reclaim":
            narrow = _beyond_quota
        return super().pool(action, narrow)


def _beyond_quota(cycle: Cycle, gangs: list[PlacedGang]) -> list[PlacedGang]:
    """The gangs each queue runs beyond its deserved quota: walking a queue's gangs most
    important first (non-preemptible, higher priority, longer running), those that keep
    the queue within its quota are protected."""
    specs = cycle.book.tree.specs
    kept: set[str] = set()
    by_queue: dict[str, list[PlacedGang]] = {}
    for gang in cycle.snapshot.placed:
        if gang.queue in specs:
            by_queue.setdefault(gang.queue, []).append(gang)
    for queue, placed in by_queue.items():
        quota, total = specs[queue].quota, Resources()
        for gang in sorted(placed, key=_importance):
            with_it = total + gang.total
            if in_quota(quota, with_it, gang.total):
                total = with_it
                kept.add(gang.gang_id)
    return [g for g in gangs if g.gang_id not in kept]


def _importance(gang: PlacedGang) -> tuple:
    since = gang.running_since if gang.running_since is not None else math.inf
    return (gang.preemptible, -gang.priority, since, gang.gang_id)
