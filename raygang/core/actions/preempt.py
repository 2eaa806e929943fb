"""preempt: a gang displaces strictly lower-priority preemptible gangs of its own queue
— or of any queue when it is of a non-preemptible class (inference) and
`cross_queue_preemption` is on."""

from __future__ import annotations

from raygang.core.actions.action import Action, CycleState
from raygang.core.gang import PendingGang
from raygang.core.snapshot import PlacedGang


def preempt(cycle: CycleState, gang: PendingGang) -> bool:
    across = cycle.config.cross_queue_preemption and not gang.preemptible
    # Where nobody it may stop runs below its priority (a cluster of one class), there
    # is no candidate: its pool (every stoppable gang, sorted) is not built, and the
    # search only places it on what earlier actions freed, as with an empty pool.
    pool = cycle.pool("preempt") if cycle.lowest_priority() < gang.priority \
        else cycle.empty_pool()
    below = pool.candidates(None if across else gang.queue, below=gang.priority)
    return cycle.search(gang, pool, below, "preempt")


def why(victim: PlacedGang, gang: PendingGang) -> str:
    return (
        f"preempted for gang {gang.gang_id} (priority {gang.priority} > {victim.priority}"
        f"{'' if victim.queue == gang.queue else f', from queue {gang.queue!r}'})"
    )


ACTION = Action("preempt", preempt, no_room={
    "none": "; no lower-priority preemptible gang runs that it may preempt",
    "some": "; preempting lower-priority gangs would not make room",
}, why=why, verb="preempted", order_key="preempt_victim_order", delay_key="preempt_delay_s",
    min_runtime_key="preempt_min_runtime_s")
