"""One scheduling cycle as a pure function: `schedule(snapshot, pending, config, now) -> Plan`
(`core.cycle` holds the cycle, `core.actions` what it does)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from raygang.core.actions import ACTIONS
from raygang.core.actions.action import Action
from raygang.core.backlog import Backlog
from raygang.core.config import PolicyConfig
from raygang.core.cycle import Cycle
from raygang.core.placement import EverFits
from raygang.core.domain_reasons import why_not_placed
from raygang.core.gang import PendingGang
from raygang.core.memory import CycleMemory
from raygang.core.plan import Plan
from raygang.core.snapshot import ClusterSnapshot
from raygang.core.spec import GangSpec


def schedule(
    snapshot: ClusterSnapshot,
    pending: Sequence[PendingGang] | Backlog,
    config: PolicyConfig,
    now: float,
    memory: CycleMemory | None = None,
    actions: Mapping[str, Action] = ACTIONS,
) -> Plan:
    """Admit what fits, reclaim and preempt what policy allows; say why the rest wait.
    `pending`: the gangs (every waiting gang is explained now), or a `Backlog` of them
    kept sorted by the caller: then a cycle costs what it looks at, not how many wait
    (the reasons of the gangs behind a blocked queue head are read when asked).
    `memory`: what the caller's scheduler keeps from one cycle to the next (`Scheduler`
    holds one); the plan is the same with or without. `actions`: what the names in
    `config.actions` are (a baseline's own variants)."""
    cycle = Cycle(snapshot, config, now, actions, memory)
    if isinstance(pending, Backlog):
        return cycle.run(pending)
    return cycle.run(Backlog.of(pending), eager=True)


class Scheduler:
    """`schedule` for one scheduler: its cycles, one after another, share a memory
    (`core.memory`), so that each costs what changed since the last. One per control
    loop (or simulated control plane); a call is a cycle, as `schedule`."""

    def __init__(self, actions: Mapping[str, Action] = ACTIONS):
        self.memory = CycleMemory()
        self.actions = actions

    def __call__(self, snapshot: ClusterSnapshot, pending: Sequence[PendingGang] | Backlog,
                 config: PolicyConfig, now: float) -> Plan:
        return schedule(snapshot, pending, config, now, self.memory, self.actions)


def unschedulable_reason(
    spec: GangSpec, snapshot: ClusterSnapshot, config: PolicyConfig | None = None,
    memory: CycleMemory | None = None,
) -> str | None:
    """Why `spec` could never be admitted: a bad queue, a limit below its size, or no
    room for it on this cluster even if it were empty. None if it could be. `memory`:
    the scheduler's (its answers per shape are shared with its cycles')."""
    if config is not None:
        problem = config.queue_tree.problem(spec)
        if problem:
            return problem
    if not snapshot.alive_nodes:
        return "the cluster has no alive nodes"
    ever = EverFits(snapshot, memory)
    if ever.fits_shape(spec.shape):
        return None
    return why_not_placed(spec.min_bundles, spec.strategy, ever.empty, spec.layout) + \
        " (even with the cluster empty)"
