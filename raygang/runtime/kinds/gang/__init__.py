"""A plain gang on Ray: one placement group and a member actor per bundle (`launch.py`); an
elastic one's surplus members in groups of their own (`elastic.py`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from raygang.control.records import GangRecord
from raygang.control.status import MemberStatus
from raygang.core.spec import GangSpec
from raygang.core.topology import pins
from raygang.runtime.kinds.gang.elastic import ElasticLaunch
from raygang.runtime.kinds.gang.launch import GangLaunch
from raygang.runtime.kinds.kind import Host, RunKind
from raygang.runtime.names import member_name, pg_name
from raygang.runtime.ray_private import group_nodes

if TYPE_CHECKING:  # the scheduler's recovery hands it in
    from raygang.runtime.scheduler.leftovers import RayLeftovers


def _launch(record: GangRecord) -> type[GangLaunch]:
    """An elastic gang's members come and go: its launch resizes."""
    return ElasticLaunch if record.spec.elastic else GangLaunch


def new_run(host: Host, record: GangRecord, nodes: Sequence[str], attempt: int,
            on_member_ready: Callable[[MemberStatus], None]) -> GangLaunch:
    """Each bundle pinned to its node, and, for a gang with a topology, to the label
    values of its domains there (Ray then places it nowhere else)."""
    return _launch(record)(record.gang_id, record.spec, record.programs, nodes, attempt,
                           on_member_ready=on_member_ready,
                           pins=pins(record.spec.layout, nodes, host.node_labels))


def adopt(host: Host, record: GangRecord, leftovers: RayLeftovers) -> GangLaunch | None:
    """Its minimum's group and members must all be there; an elastic gang's surplus
    members are those found whole (member and own group, `record.live.surplus` is set to
    them: the journal does not follow resizes), in whole units (ratio steps); a half-made
    one, and the rest of a step missing a member, is removed."""
    gang_id, spec = record.gang_id, record.spec
    groups = {leftovers.names[g]: g for g in leftovers.groups.get(gang_id, [])}
    actors = set(leftovers.actors.get(gang_id, []))
    main = groups.pop(pg_name(gang_id), None)
    if main is None or any(member_name(gang_id, s) not in actors for s in spec.min_slots):
        return None
    whole: dict[str, str] = {}  # surplus member -> its own group, both found
    for slot in spec.surplus_slots:
        group, actor = groups.pop(member_name(gang_id, slot), None), member_name(gang_id, slot)
        if group is not None and actor in actors:
            whole[slot.name] = group
        else:
            leftovers.remove(actor if actor in actors else None, group)
    surplus = _whole_units(gang_id, spec, whole, leftovers)
    if groups:  # a group of no member of it: not this gang's as it runs
        return None
    launch = _launch(record).adopt(gang_id, spec, record.nodes,
                                   attempt=record.restarts + record.preemptions, pg_id=main,
                                   surplus=surplus, programs=record.programs,
                                   on_member_ready=record.members.append)
    if launch is not None:
        record.live.surplus = {name: (group_nodes(g) or [None])[0] or ""
                          for name, g in surplus.items()}
    return launch


def _whole_units(gang_id: str, spec: GangSpec, whole: dict[str, str],
                 leftovers: RayLeftovers) -> dict[str, str]:
    """The surplus members found whole, kept in whole units only (a member dead while the
    scheduler was down leaves the rest of its ratio step, which a gang must never hold
    in part: removed; the scheduler may grow the step again whole)."""
    kept: dict[str, str] = {}
    for unit in spec.surplus_units:
        if all(m in whole for m in unit):
            kept.update((m, whole[m]) for m in unit)
            continue
        for m in unit:
            if m in whole:
                leftovers.remove(member_name(gang_id, spec.slots_by_name[m]), whole[m])
    return kept


KIND = RunKind("gang", new_run, adopt)
