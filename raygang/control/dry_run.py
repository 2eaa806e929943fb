"""`raygang.dry_run`: a plan computed with the gang added, read for that gang only."""

from __future__ import annotations

from raygang.core.gang import PendingGang
from raygang.core.plan import Plan
from raygang.core.snapshot import ClusterSnapshot
from raygang.control.records import GangRecord
from raygang.control.status import DryRunResult, Victim


def dry_run_result(plan: Plan, probe: PendingGang, snapshot: ClusterSnapshot,
                   gangs: dict[str, GangRecord]) -> DryRunResult:
    """Would `probe` be admitted (where, and after which gangs being stopped), preempt
    (whom, why) or wait (why, where in line)?"""
    names = {n.node_id: n.display for n in snapshot.nodes}
    for admission in plan.admissions:
        if admission.gang_id != probe.gang_id:
            continue
        victims = _stopped(plan, gangs, admission.victims)
        others = _stopped(plan, gangs, admission.waits_for_others)
        where = ", ".join(sorted({names.get(n, n) for n in admission.nodes}))
        after = _after(others)
        if victims:
            return DryRunResult(
                outcome="preempt", nodes=list(admission.nodes), victims=victims,
                waits_for=others,
                reason=f"would {admission.action} {len(victims)} gang(s), then run on "
                       f"{where}{after}",
            )
        return DryRunResult(outcome="admit", nodes=list(admission.nodes), waits_for=others,
                            reason=f"would be admitted now on {where}{after}")
    waiting = plan.waiting[probe.gang_id]
    return DryRunResult(outcome="wait", code=waiting.code.value, reason=waiting.message,
                        queue_position=plan.positions.get(probe.gang_id))


def _stopped(plan: Plan, gangs: dict[str, GangRecord], ids: tuple[str, ...]) -> list[Victim]:
    """The gangs `ids`, each with why this plan stops it."""
    why = {p.victim: p for p in plan.preemptions}
    return [Victim(gang_id=g, name=gangs[g].spec.name, action=why[g].action,
                   reason=why[g].reason) for g in ids]


def _after(others: list[Victim]) -> str:
    if not others:
        return ""
    ids = ", ".join(v.gang_id for v in others)
    return (f", once {len(others)} gang(s) stopped for other gangs have stopped ({ids}): "
            f"it takes capacity they free")
