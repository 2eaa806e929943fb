"""Sizing the cluster to the queue: the runtime side of `core.scale`.

After every scheduling cycle (and at least every resync interval) a `ScaleDriver` step:
observes the nodes, reads the node groups, asks `core.scale.plan_scale` what to add and
what to release, and applies that through exactly one `Scaler` (`scalers.py`):

- `KubeRayScaler` (mode `kuberay`) patches the RayCluster: a worker group's `replicas` to
  grow it, `scaleStrategy.workersToDelete` (naming pods) to remove specific idle nodes.
- `AutoscalerScaler` (mode `autoscaler`) requests the whole desired cluster as node-shaped
  bundles (Ray's autoscaler packs requested bundles onto node *totals*, so busy nodes
  count), and clears it when no gang waits for a node; Ray's autoscaler then removes idle
  nodes itself. `request_resources` replaces the last request, and Ray Train and Ray Data
  call it every 20 s through their AutoscalingCoordinator, so raygang's request goes through
  that coordinator too (as requester "raygang"), which merges every requester's bundles.

Ray nodes map to groups by the `ray.io/node-group` label (Ray sets it from the
`RAY_NODE_TYPE_NAME` that KubeRay and the autoscaler's providers put on each node) and to
pod names by the instance id the GCS keeps for each node (`RAY_CLOUD_INSTANCE_ID`, which
KubeRay sets to the pod name). Blocking calls (Kubernetes API, GCS) run in a thread, so
the scheduler's event loop never waits on them. A node being released is marked
`draining` before the request goes out, so no cycle places a gang on it meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import ray

from raygang.control.config import ScaleConfig
from raygang.control.status import GroupStatus, ScalingStatus
from raygang.core.gang import PendingGang
from raygang.core.scale import NodeGroup, ScalePlan, plan_scale
from raygang.core.snapshot import ClusterSnapshot, NodeState
from raygang.runtime.ray_private import node_instance_ids
from raygang.runtime.scheduler.scalers import USAGE_IGNORED, Scaler, scaler_from_config

log = logging.getLogger(__name__)

NODE_GROUP_LABEL = "ray.io/node-group"
# A node asked to go that is still up after this long is offered to the scheduler again
# (the operator did not remove it: a failed delete, or it was listed twice).
DRAIN_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class RayNode:
    node_id: str
    group: str | None  # worker group / node type; None for nodes of no group
    pod: str | None  # the pod (instance) name, where known


def ray_nodes() -> dict[str, RayNode]:
    """Alive Ray nodes with their group and pod name (blocking: one GCS call each)."""
    instances: dict[str, str] = {}
    try:
        instances = node_instance_ids(ray.get_runtime_context().gcs_address)
    except Exception:  # an older GCS, or no autoscaler state: groups still work, names not
        log.warning("cannot read node instance ids from the GCS", exc_info=True)
    out = {}
    for info in ray.nodes():
        if not info.get("Alive"):
            continue
        labels = info.get("Labels") or {}
        node_id = info["NodeID"]
        out[node_id] = RayNode(node_id, labels.get(NODE_GROUP_LABEL),
                               instances.get(node_id) or labels.get("ray.io/pod-name"))
    return out


def in_use(node: NodeState) -> bool:
    """Whether anything (raygang's or not) holds resources on the node."""
    return any(node.free.get(k) < amount - 1e-9
               for k, amount in node.total.items() if k not in USAGE_IGNORED)


@dataclass
class Request:
    group: str
    nodes: int
    at: float


@dataclass
class ScaleDriver:
    """State carried between scale steps: idle clocks, when groups grew, which gang asked
    for which nodes when, and which nodes are being released."""

    config: ScaleConfig
    scaler: Scaler | None = None
    clock: Callable[[], float] = time.time
    idle_since: dict[str, float] = field(default_factory=dict)
    last_scale_up: dict[str, float] = field(default_factory=dict)
    requested: dict[str, Request] = field(default_factory=dict)  # gang id -> its request
    draining: dict[str, float] = field(default_factory=dict)  # node id -> asked to go at
    groups: list[NodeGroup] = field(default_factory=list)
    desired: dict[str, int] = field(default_factory=dict)
    last_plan: ScalePlan | None = None
    last_error: str | None = None
    actions: list[str] = field(default_factory=list)  # what was requested, newest last
    fresh: dict[str, Request] = field(default_factory=dict)  # requests the last step made

    async def step(self, observe: Callable[[], ClusterSnapshot],
                   waiting: Sequence[PendingGang], busy_nodes: Collection[str],
                   planned: Callable[[], None] | None = None) -> ScalePlan | None:
        """One scale decision and its requests. Errors are kept in `last_error` (the next
        step tries again); never raised, so the scheduler loop does not care. `planned`:
        called once the decision is made, before the requests go out (`note` answers from
        the new plan from then on, and from the last one again if the requests fail)."""
        try:
            if self.scaler is None:
                self.scaler = await asyncio.to_thread(scaler_from_config, self.config)
            return await self._step(observe, waiting, busy_nodes, planned)
        except Exception as error:
            message = f"{type(error).__name__}: {error}"
            if message != self.last_error:  # once per distinct error, not every second
                log.warning("scale step failed (retried every cycle)", exc_info=True)
            self.last_error = message
            return None

    async def _step(self, observe, waiting, busy_nodes, planned) -> ScalePlan:
        assert self.scaler is not None
        nodes = await asyncio.to_thread(ray_nodes)
        now = self.clock()
        snapshot = observe()
        for node_id, since in list(self.draining.items()):
            if node_id not in nodes or now - since > DRAIN_TIMEOUT_S:
                del self.draining[node_id]
        live = ClusterSnapshot(
            tuple(n for n in snapshot.alive_nodes if n.node_id not in self.draining),
            snapshot.placed,
        )
        self._clock_idle(live, now)
        node_groups = {i: n.group for i, n in nodes.items()
                       if n.group is not None and i not in self.draining}
        up: dict[str, int] = {}
        for group in node_groups.values():
            up[group] = up.get(group, 0) + 1
        groups = await asyncio.to_thread(self.scaler.groups, up)
        known = {g.name for g in groups}
        node_groups = {i: g for i, g in node_groups.items() if g in known}
        plan = plan_scale(live, waiting, groups, node_groups, self.idle_since, busy_nodes,
                          self.config, now, self.last_scale_up)
        release: dict[str, list[str]] = {}
        if self.scaler.mode == "kuberay":  # Ray's autoscaler picks which idle node goes
            for node_id in plan.release:
                pod = nodes[node_id].pod
                if pod is None:
                    log.warning("idle node %s has no pod name: not released", node_id)
                    continue
                release.setdefault(node_groups[node_id], []).append(pod)
                self.draining[node_id] = now  # before any await: no cycle may use it now
        # What the pending gangs wait for is known now, before the requests go out: in
        # autoscaler mode the first one waits for Ray's autoscaling coordinator to start (a
        # new process, up to COORDINATOR_TIMEOUT_S), and on a loaded machine the nodes
        # came up and the gang ran before its status ever said what it waited for.
        before = self.requested, self.fresh, self.last_plan
        self._remember(plan, waiting, now)
        self.last_plan = plan
        if planned is not None:
            planned()
        try:
            alive = {n.pod for n in nodes.values() if n.pod is not None}
            done = await asyncio.to_thread(self.scaler.apply, plan, groups, release,
                                           bool(plan.waiting_for), alive)
        except Exception:
            for node_id in plan.release:
                self.draining.pop(node_id, None)
            self.requested, self.fresh, self.last_plan = before  # nothing was asked for
            raise
        for name in plan.scaled_up:
            self.last_scale_up[name] = now
        self.groups, self.desired = groups, dict(plan.desired)
        self.last_error = None
        self.actions = (self.actions + [f"{_iso(now)} {line}" for line in done])[-50:]
        return plan

    def _clock_idle(self, snapshot: ClusterSnapshot, now: float) -> None:
        holding = {node_id for gang in snapshot.placed for node_id, _ in gang.bundles}
        idle = {n.node_id for n in snapshot.alive_nodes
                if n.node_id not in holding and not in_use(n)}
        self.idle_since = {n: self.idle_since.get(n, now) for n in idle}

    def _remember(self, plan: ScalePlan, waiting: Sequence[PendingGang], now: float) -> None:
        ids = {g.gang_id for g in waiting}
        self.requested = {g: r for g, r in self.requested.items() if g in ids}
        self.fresh = {}
        for gang_id, (group, new) in plan.waiting_for.items():
            current = self.requested.get(gang_id)
            if new and (current is None or current.group != group):
                self.requested[gang_id] = self.fresh[gang_id] = Request(group, new, now)

    def note(self, gang_id: str) -> str | None:
        """What a pending gang waits for, as its status says it (None: no nodes)."""
        plan = self.last_plan
        if plan is None:
            return None
        if gang_id in plan.infeasible:
            return f"no worker group can ever host it: {plan.infeasible[gang_id]}"
        if gang_id in plan.at_max:
            return f"no node can be added: {plan.at_max[gang_id]}"
        request = self.requested.get(gang_id)
        if gang_id not in plan.waiting_for:
            # Its nodes were asked for and it still waits: a plan made while they come up
            # (one up, its group label not read yet) may place it on them without naming
            # their group, yet the request stands until it is admitted.
            return None if request is None else _waiting_for(request)
        group, _ = plan.waiting_for[gang_id]
        if request is None or request.group != group:
            return f"waiting for nodes of group {group} already requested"
        return _waiting_for(request)

    def status(self) -> ScalingStatus:
        return ScalingStatus(
            mode=self.config.mode,
            groups=[GroupStatus(name=g.name, shape=g.shape.to_dict(), min_nodes=g.min_nodes,
                                max_nodes=g.max_nodes, nodes=g.nodes,
                                desired=self.desired.get(g.name, g.nodes))
                    for g in self.groups],
            draining=sorted(self.draining),
            last_error=self.last_error,
            actions=list(self.actions),
        )


def _waiting_for(request: Request) -> str:
    plural = "node" if request.nodes == 1 else "nodes"
    return (f"waiting for {request.nodes} {plural} of group {request.group} "
            f"(requested at {_iso(request.at)})")


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


__all__ = ["RayNode", "ScaleDriver", "in_use", "ray_nodes"]
