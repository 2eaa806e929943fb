"""The policies a replay can compare: raygang's own, and baselines in the same simulator.

Each is raygang's control plane with a config (and, for two of them, a decision function
in place of `core.schedule`). Where a baseline is raygang's core under another config,
its rules are the core's, documented there; the others cite the scheduler they follow.

- `raygang`: today's `core.schedule` with one queue per tenant, quota = its guarantee
  (fair share, reclaim, preempt; a queue's line goes on past a blocked head for up to
  `backfill_lookahead` gangs, unless the config says otherwise).
- `fifo`: one shared queue, first come first served, nothing preempted; a job that does not
  fit holds back every job behind it (no backfill) — the classic cluster FIFO baseline.
- `static`: every tenant on its own nodes (its guarantee in whole nodes), FIFO inside,
  nothing borrowed: how the Helios and Lucid simulators model Philly's VCs ("each VC an
  isolated cluster of that many nodes", SOURCE.txt of helios-vc). A job larger than its
  tenant's partition never runs there and is reported as skipped.
- `sjf`: an oracle reference: one shared queue ordered by the job's true duration, shortest
  first, non-preemptive, with backfill (a job that does not fit lets the next one try).
- `kueue`: Kueue's rules (`sim.baselines.kueue`).
- `kai`: KAI Scheduler's rules (`sim.baselines.kai`); `kai-tbf` adds its time-based fair
  share (the product's `core.usage`, configured as KAI configures it).
- `raygang-tbf` / `raygang-no-tbf`: `raygang` with time-based fair share (`core.usage`)
  on / off, whatever the default: the comparison that chose the default.

The baselines keep time-based fair share off (KAI's needs Prometheus and is off unless
configured; Kueue's admission fair sharing orders LocalQueues of one ClusterQueue, which
the Kueue-style baseline does not model), whatever the config replayed says.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from raygang.control.config import SchedulerConfig
from raygang.control.loop import Decide
from raygang.core.queues import DEFAULT_QUEUE, QueueSpec
from raygang.core.schedule import Scheduler
from raygang.sim import inference
from raygang.sim.baselines import kai, kueue
from raygang.sim.settings import SimSettings
from raygang.sim.trace import Trace, TraceJob


@dataclass(frozen=True)
class Part:
    """A control plane of its own on `nodes` nodes, for the jobs of `tenants`."""

    prefix: str
    nodes: int
    tenants: tuple[str, ...]
    config: SchedulerConfig


@dataclass(frozen=True)
class SimPolicy:
    name: str
    summary: str
    shared_queue: bool = False  # every job in one queue (else each in its tenant's)
    partitioned: bool = False  # every tenant on its own nodes
    by_duration: bool = False  # ordered by true duration, shortest first (an oracle)
    config: dict = field(default_factory=dict)  # policy keys set over the user's config
    # What makes the decision function of one control plane (it keeps a memory from one
    # cycle to the next: `core.memory`); None: the core's own (`core.schedule.Scheduler`)
    decider_of: Callable[[], Decide] | None = None

    def queue(self, job: TraceJob) -> str:
        return DEFAULT_QUEUE if self.shared_queue or self.partitioned else job.queue

    def priority(self, job: TraceJob) -> int | str:
        if self.by_duration:  # a higher priority goes first: the shortest job
            return -math.ceil(job.duration_s)
        return "training" if self.shared_queue or self.partitioned else job.priority

    def parts(self, trace: Trace, settings: SimSettings, config: SchedulerConfig
              ) -> list[Part]:
        queues = tenant_queues(trace, config)
        if self.partitioned:
            out = []
            for queue in queues:
                nodes = int(queue.quota.get("GPU")) // settings.gpus_per_node
                if nodes and queue.name in trace.queues:
                    out.append(Part(f"{queue.name}-", nodes, (queue.name,), self._config(
                        config, (QueueSpec(name=DEFAULT_QUEUE),))))
            return out
        if self.shared_queue:
            queues = (QueueSpec(name=DEFAULT_QUEUE),)
        elif settings.inference_gpus:  # the stream's queue (sim.inference)
            queues = (*queues, inference.queue(settings))
        return [Part("", settings.nodes, tuple(trace.queues), self._config(config, queues))]

    def _config(self, config: SchedulerConfig, queues: tuple[QueueSpec, ...]
                ) -> SchedulerConfig:
        data = {**config.model_dump(), "queues": [q.model_dump() for q in queues],
                **self.config}
        return SchedulerConfig.model_validate(data)

    def decider(self) -> Decide:
        """What a control plane of this policy decides with (a fresh one per plane)."""
        return Scheduler() if self.decider_of is None else self.decider_of()


def tenant_queues(trace: Trace, config: SchedulerConfig) -> tuple[QueueSpec, ...]:
    """The config's queues, plus one per tenant it does not name, with the trace's quota
    for it (in GPUs) where the trace has one."""
    named = {q.name for q in config.queues}
    added = tuple(QueueSpec(name=t, quota={"GPU": trace.quotas[t]} if trace.quotas.get(t)
                            else {})
                  for t in trace.queues if t not in named)
    return tuple(q for q in config.queues if q.name != DEFAULT_QUEUE or not added) + added


def tenant_quotas(trace: Trace, config: SchedulerConfig) -> dict[str, int]:
    """Each tenant's guaranteed GPUs (its queue's GPU quota)."""
    quotas = {q.name: int(q.quota.get("GPU")) for q in tenant_queues(trace, config)}
    return {t: quotas.get(t, 0) for t in trace.queues}


# The baselines hold nothing for long-waiting gangs (raygang's sla_waiting_time_s is its
# own rule; FIFO and the static partitions, one blocked line each, would not change), and
# remember no usage (see above).
_NO_HOLD = {"sla_waiting_time_s": None, "usage": {"enabled": False}}
# FIFO, the static partitions and the KAI-style baseline keep a queue's line strictly in
# order (a blocked head holds back the rest), whatever raygang's default lookahead is, and
# whatever run time a job declares (`--declared-runtime`: none of them backfills by it).
_STRICT = {"backfill": False, "backfill_lookahead": 0, "backfill_max_runtime_s": 0}

POLICIES: dict[str, SimPolicy] = {p.name: p for p in (
    SimPolicy("raygang", "raygang's core.schedule: a queue per tenant, quota = guarantee"),
    SimPolicy("fifo", "one shared FIFO queue, no preemption, no backfill", shared_queue=True,
              config={"actions": ["allocate"], **_STRICT, **_NO_HOLD}),
    SimPolicy("static", "a static partition per tenant (its guarantee in whole nodes), "
              "FIFO inside", partitioned=True,
              config={"actions": ["allocate"], **_STRICT, **_NO_HOLD}),
    SimPolicy("sjf", "oracle: one queue, shortest true duration first, backfill, "
              "no preemption", shared_queue=True, by_duration=True,
              config={"actions": ["allocate"], "backfill": True, **_NO_HOLD}),
    SimPolicy("kueue", "Kueue: a ClusterQueue per tenant in one cohort, nominal quota, "
              "borrowing, BestEffortFIFO, reclaim within the cohort",
              decider_of=kueue.Decider,
              config={"usage": {"enabled": False}}),
    SimPolicy("kai", "KAI Scheduler: raygang's cycle, reclaim protecting only what a "
              "queue runs within its deserved quota", decider_of=kai.decider,
              config={"preemption": kai.PREEMPTION, **_STRICT, **_NO_HOLD}),
    SimPolicy("kai-tbf", "KAI Scheduler with its time-based fair share (168 h window, "
              "kValue 0.5): over-quota shares fall with past usage", decider_of=kai.decider,
              config={"preemption": kai.PREEMPTION, **_STRICT, **_NO_HOLD,
                      "usage": kai.USAGE}),
    SimPolicy("raygang-tbf", "raygang with time-based fair share on (core.usage)",
              config={"usage": {"enabled": True}}),
    SimPolicy("raygang-no-tbf", "raygang with time-based fair share off (core.usage)",
              config={"usage": {"enabled": False}}),
)}


def policy(name: str) -> SimPolicy:
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r} (known: {', '.join(POLICIES)})") from None
