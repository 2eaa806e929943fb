"""KAI Scheduler's rules, as raygang's own cycle with other actions (`decider`).

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

Time-based fair share (`kai-tbf`): KAI's proportion plugin divides the capacity beyond
deserved quotas among queues by a share weight that falls with each queue's past usage
(docs/time-based-fairshare; `calcShareWeights` in
pkg/scheduler/plugins/proportion/resource_division): max(0, w + k (w - u)). raygang's core
has that rule (`core.usage`); here it is configured as KAI configures it (`USAGE`): a
168 h sliding window, no half-life, kValue 0.5 (KAI's default kValue is not in its docs;
the docs' example, 0.5, is used), no admission penalty and no usage order (those are
Kueue's). Deserved quotas are unchanged ("this does not affect in-quota allocation").
KAI reads usage from Prometheus; here the control loop's ledger keeps it, as in the
product.

Not modelled: its queue order among victims (the queue furthest over its fair share first;
here the core's victim order: lowest priority, most recently started, smallest), elastic
jobs.
"""

from __future__ import annotations

from raygang.core.actions import ACTIONS as CORE_ACTIONS
from raygang.core.actions import reclaim
from raygang.core.schedule import Scheduler


# KAI's minruntime plugin defaults to 0 s for reclaim and preempt (docs/plugins/minruntime.md:
# "0s means workloads are instantly reclaimable/preemptible"), and its preemptionDelay is
# unset by default (v0.17); victims as raygang took them before its own policy changed
# (most recently started first), so the baseline stays as measured.
PREEMPTION = {"reclaim_min_runtime_s": 0.0, "preempt_min_runtime_s": 0.0,
              "reclaim_delay_s": 0.0, "preempt_delay_s": 0.0, "reclaim_victim_order": "newest",
              "reclaim_trade_ratio": None, "reclaim_checkpoint_ratio": None}


# raygang's actions with KAI's reclaim protection: configuration, not a cycle of its own.
ACTIONS = {**CORE_ACTIONS, "reclaim": reclaim.protecting("quota")}


def decider() -> Scheduler:
    """What one control plane decides with: the core's cycle with these actions, and a
    memory of its own from one cycle to the next (`core.memory`)."""
    return Scheduler(ACTIONS)


# KAI's time-based fair share as its docs configure it (`usageDBConfig.usageParams`,
# `kValue`), in raygang's `core.usage`.
USAGE = {"enabled": True, "window_s": 168 * 3600.0, "half_life_s": None, "k_value": 0.5,
         "admission_penalty_s": 0.0, "order_by_usage": False}
