"""A Serve application on Ray: deployed on the reserved nodes (`launch.py`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from raygang.control.kinds.deployment import Served
from raygang.control.records import GangRecord
from raygang.control.status import MemberStatus
from raygang.runtime.kinds.deployment.launch import ServeLaunch
from raygang.runtime.kinds.kind import Host, RunKind

if TYPE_CHECKING:  # the scheduler's recovery hands it in
    from raygang.runtime.scheduler.leftovers import RayLeftovers


def new_run(host: Host, record: GangRecord, nodes: Sequence[str], attempt: int,
            on_member_ready: Callable[[MemberStatus], None]) -> ServeLaunch:
    served: Served = record.workload
    return ServeLaunch(record.gang_id, record.spec, served.deployment, served.app,
                       nodes, host.serve_http_port, moved=record.rebook,
                       on_member_ready=on_member_ready)


def adopt(host: Host, record: GangRecord, leftovers: RayLeftovers) -> ServeLaunch | None:
    """A deployment whose Serve application still exists."""
    from raygang.runtime import serving  # imports Serve: only with a deployment to adopt

    served: Served = record.workload
    name = served.deployment.name
    if serving.app_lost(name) is not None:
        return None
    surplus: dict[str, str] = {}
    running: dict[str | None, list[str]] = {}  # deployment (None: the ingress) -> nodes
    if record.spec.elastic:  # its replicas beyond the minimum, as Serve runs them
        roles = served.deployment.roles  # deployment -> role (an app of several)
        if roles:
            found = {d: [node for node, _ in replicas] for d, replicas
                     in serving.deployment_replicas(name).items() if d in roles}
            counts = {roles[d]: len(nodes) for d, nodes in found.items()}
            running = {d: nodes for d, nodes in found.items()}
        else:
            running = {None: serving.replica_nodes(name) or []}
            counts = {record.spec.roles[0].name: len(running[None])}
        # whole ratio steps only: a step half there (Serve was mid-resize) is not booked
        surplus = {slot.name: "" for slot in record.spec.surplus_running(counts)}
    launch = ServeLaunch.adopted(record.gang_id, record.spec, served.deployment,
                                 record.nodes, host.serve_http_port, surplus,
                                 moved=record.rebook)
    record.live.surplus = dict(surplus)
    if surplus:  # where: the books follow where Serve runs them
        launch.follow_all(running)
    return launch


KIND = RunKind("deployment", new_run, adopt)
