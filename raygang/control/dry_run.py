"""`raygang.dry_run`: a plan computed with the gang added, read for that gang only."""

from __future__ import annotations

from typing import Protocol

from raygang.control.intake import revalidated
from raygang.control.records import GangRecord
from raygang.control.registry import Registry
from raygang.control.status import DryRunResult, Victim
from raygang.core.config import PolicyConfig
from raygang.core.gang import PendingGang
from raygang.core.plan import Plan
from raygang.core.schedule import schedule, unschedulable_reason
from raygang.core.snapshot import ClusterSnapshot
from raygang.core.spec import GangSpec



class Gangs(Protocol):
    """The scheduler's gangs by id (`Registry`); KeyError for one forgotten already."""

    def __getitem__(self, gang_id: str) -> GangRecord: ...


def what_if(spec: GangSpec, snapshot: ClusterSnapshot, registry: Registry,
            policy: PolicyConfig, now: float) -> DryRunResult:
    """The answer for `spec` submitted now, behind the registry's backlog."""
    spec = revalidated(spec, GangSpec, "dry_run")
    # After every gang submitted so far, as a real submission would be; the counter is not
    # advanced (a what-if uses up nothing).
    seq = max((r.seq for r in registry), default=-1) + 1
    reason = unschedulable_reason(spec, snapshot, policy)
    if reason:
        return DryRunResult(outcome="rejected", reason=reason)
    cls = policy.priority_class(spec)
    probe = PendingGang("(dry run)", spec, cls.value, seq, cls.preemptible)
    backlog = registry.backlog(now)
    pending = [g for line in backlog.lines.values() for g in line]
    return dry_run_result(schedule(snapshot, [*pending, probe], policy, now), probe,
                          snapshot, registry)


def dry_run_result(plan: Plan, probe: PendingGang, snapshot: ClusterSnapshot,
                   gangs: Gangs) -> DryRunResult:
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


def _stopped(plan: Plan, gangs: Gangs,
             ids: tuple[str, ...]) -> list[Victim]:
    """The gangs `ids`, each with why this plan stops it."""
    why = {p.victim: p for p in plan.preemptions}
    out = []
    for g in ids:
        try:
            name = gangs[g].spec.name
        except KeyError:  # ended and forgotten already
            name = g
        if g in why:
            out.append(Victim(gang_id=g, name=name, action=why[g].action, reason=why[g].reason))
        else:  # stopping already: preempted by an earlier cycle, or ended and tearing down
            out.append(Victim(gang_id=g, name=name, action="stopping",
                              reason="already stopping (preempted earlier, or ended)"))
    return out


def _after(others: list[Victim]) -> str:
    if not others:
        return ""
    ids = ", ".join(v.gang_id for v in others)
    return (f", once {len(others)} gang(s) stopping for other gangs or on their own have "
            f"stopped ({ids}): it takes capacity they free")
