"""`raygang.dry_run`: a plan computed with the gang added, read for that gang only."""

from __future__ import annotations

from raygang.core.gang import PendingGang
from raygang.core.plan import Plan
from raygang.core.snapshot import ClusterSnapshot
from raygang.runtime.records import GangRecord
from raygang.runtime.status import DryRunResult, Victim


def dry_run_result(plan: Plan, probe: PendingGang, snapshot: ClusterSnapshot,
                   gangs: dict[str, GangRecord]) -> DryRunResult:
    """Would `probe` be admitted (where), preempt (whom, why) or wait (why, where in line)?"""
    names = {n.node_id: n.display for n in snapshot.nodes}
    for admission in plan.admissions:
        if admission.gang_id != probe.gang_id:
            continue
        victims = [
            Victim(gang_id=p.victim, name=gangs[p.victim].spec.name, action=p.action,
                   reason=p.reason)
            for p in plan.preemptions if p.preemptor == probe.gang_id
        ]
        where = ", ".join(sorted({names.get(n, n) for n in admission.nodes}))
        if victims:
            return DryRunResult(
                outcome="preempt", nodes=list(admission.nodes), victims=victims,
                reason=f"would {admission.action} {len(victims)} gang(s), then run on {where}",
            )
        return DryRunResult(outcome="admit", nodes=list(admission.nodes),
                            reason=f"would be admitted now on {where}")
    waiting = plan.waiting[probe.gang_id]
    return DryRunResult(outcome="wait", code=waiting.code.value, reason=waiting.message,
                        queue_position=plan.positions.get(probe.gang_id))
