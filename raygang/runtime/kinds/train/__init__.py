"""A Ray Train run on Ray: its reserved nodes handed over to Train's worker group, whose
placement group raygang adopts (`launch.py`, and `runtime.handoff.train`). A Tune trial
(kind "tune") runs the same way: its nodes handed over to the trial's placement group."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from raygang.control.records import GangRecord
from raygang.control.status import MemberStatus
from raygang.runtime.kinds.kind import Host, RunKind
from raygang.runtime.kinds.train.launch import TrainLaunch
from raygang.runtime.ray_private import group_nodes

if TYPE_CHECKING:  # the scheduler's recovery hands it in
    from raygang.runtime.scheduler.leftovers import RayLeftovers


def new_run(host: Host, record: GangRecord, nodes: Sequence[str], attempt: int,
            on_member_ready: Callable[[MemberStatus], None]) -> TrainLaunch:
    return TrainLaunch(record.gang_id, record.spec, nodes, host.lease_s,
                       (record.workload or {}).get("controller"), host.sessions)


def adopt(host: Host, record: GangRecord, leftovers: RayLeftovers) -> TrainLaunch | None:
    """A run whose worker group (the placement group Train made) is still there."""
    group = (record.workload or {}).get("group")
    placed = group_nodes(group) if group else None
    if not group or placed is None:
        return None
    surplus = {}
    if record.spec.elastic:  # its workers beyond the minimum, where Train runs them
        extra = Counter(n for n in placed if n) - Counter(record.nodes)
        surplus = dict(zip((s.name for s in record.spec.surplus_slots),
                           sorted(extra.elements())))
    record.live.surplus = dict(surplus)
    return TrainLaunch.adopted(record.gang_id, record.spec, record.nodes, host.lease_s,
                               record.workload.get("controller"), group, placed,
                               host.sessions, surplus)


KIND = RunKind("train", new_run, adopt)
# A Tune trial: its placement group is Tune's, handed over and adopted the same way
TUNE_KIND = RunKind("tune", new_run, adopt)
