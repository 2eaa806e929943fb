"""Sizing the cluster to the queue: the runtime side of `core.scale`.

After every scheduling cycle (and at least every resync interval) a `ScaleDriver` step:
observes the nodes, reads the node groups, asks `core.scale.plan_scale` what to add and
what to release, and applies that through exactly one `Scaler`:

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
import math
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import ray

from raygang.control.config import ScaleConfig
from raygang.core.gang import PendingGang
from raygang.core.resources import Resources
from raygang.core.scale import NodeGroup, ScalePlan, plan_scale
from raygang.core.snapshot import ClusterSnapshot, NodeState
from raygang.kuberay.client import RayClusterClient
from raygang.kuberay.groups import WorkerGroup
from raygang.control.status import GroupStatus, ScalingStatus
from raygang.runtime.names import COORDINATOR_REQUESTER_ID

log = logging.getLogger(__name__)

NODE_GROUP_LABEL = "ray.io/node-group"
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# A node asked to go that is still up after this long is offered to the scheduler again
# (the operator did not remove it: a failed delete, or it was listed twice).
DRAIN_TIMEOUT_S = 120.0
# Resources that say nothing about whether a node is in use (Ray reserves memory and
# object store per node; they do not go to zero on an idle node).
_USAGE_IGNORED = ("memory", "object_store_memory")


@dataclass(frozen=True)
class RayNode:
    node_id: str
    group: str | None  # worker group / node type; None for nodes of no group
    pod: str | None  # the pod (instance) name, where known


def ray_nodes() -> dict[str, RayNode]:
    """Alive Ray nodes with their group and pod name (blocking: one GCS call each)."""
    instances: dict[str, str] = {}
    try:
        from ray.autoscaler.v2.sdk import get_cluster_status

        status = get_cluster_status(ray.get_runtime_context().gcs_address)
        for node in [*status.active_nodes, *status.idle_nodes]:
            if node.instance_id:
                instances[node.node_id] = node.instance_id
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


class Scaler(Protocol):
    mode: str

    def groups(self, up: Mapping[str, int]) -> list[NodeGroup]:
        """The node groups now; `up` counts alive Ray nodes per group."""

    def apply(self, plan: ScalePlan, groups: Sequence[NodeGroup],
              release: Mapping[str, list[str]], waiting: bool,
              alive_pods: Collection[str] | None = None) -> list[str]:
        """Make the cluster what `plan` wants; `release` names pods per group, `alive_pods`
        are the pods of Ray nodes up now (None: not known). Returns what it did, one line
        per request."""


def group_of_worker(group: WorkerGroup, nodes: int, cost: float | None) -> NodeGroup:
    """A KubeRay worker group as a node group: a replica is `numOfHosts` Ray nodes."""
    hosts = max(1, group.num_of_hosts)
    return NodeGroup(group.name, group.resources, group.min_replicas * hosts,
                     min(group.max_replicas * hosts, 2**31 - 1), nodes, cost)


class KubeRayScaler:
    """Mode `kuberay`: raygang owns the worker groups' replicas."""

    mode = "kuberay"

    def __init__(self, client: RayClusterClient, costs: Mapping[str, float]):
        self.client = client
        self.costs = dict(costs)
        self._groups: dict[str, WorkerGroup] = {}

    def groups(self, up: Mapping[str, int]) -> list[NodeGroup]:
        self._groups = {g.name: g for g in self.client.worker_groups()}
        return [group_of_worker(g, g.replicas * max(1, g.num_of_hosts), self.costs.get(g.name))
                for g in self._groups.values()]

    def apply(self, plan: ScalePlan, groups: Sequence[NodeGroup],
              release: Mapping[str, list[str]], waiting: bool,
              alive_pods: Collection[str] | None = None) -> list[str]:
        done = []
        alive = None if alive_pods is None else set(alive_pods)
        for group in self._groups.values():  # pods deleted since: off the list (see client)
            gone = [p for p in group.workers_to_delete if alive is not None and p not in alive]
            if gone and group.name not in release:
                self.client.forget_deleted_workers(group.name, alive)
                done.append(f"{group.name}: workersToDelete -= {', '.join(gone)} (deleted)")
        for name, pods in sorted(release.items()):
            after = self.client.delete_workers(name, pods)
            done.append(f"{name}: workersToDelete += {', '.join(pods)} (replicas {after.replicas})")
        for group in groups:
            worker = self._groups[group.name]
            hosts = max(1, worker.num_of_hosts)
            want = math.ceil(plan.desired.get(group.name, group.nodes) / hosts)
            want = max(worker.min_replicas, min(worker.max_replicas, want))
            if want > worker.replicas:  # only ever up here: down is by named pods above
                after = self.client.set_replicas(group.name, want)
                done.append(f"{group.name}: replicas {worker.replicas} -> {after.replicas}")
        return done


# Ray Train V2 and Ray Data run one AutoscalingCoordinator per cluster (a detached actor)
# that merges its requesters' requests and calls `request_resources` with the merge every
# 20 s. That call replaces whatever raygang had asked for directly, so raygang asks as one
# more requester. The values are Train's: requests expire after 3 minutes, calls time out.
COORDINATOR_EXPIRE_S = 180.0
COORDINATOR_TIMEOUT_S = 5.0
_COORDINATOR = ("AutoscalingCoordinator", "AutoscalingCoordinator")  # name, namespace


class AutoscalerScaler:
    """Mode `autoscaler`: Ray's autoscaler launches and removes nodes; raygang says how
    many of each type the queue needs.

    `request` sends the whole request (an empty list clears it); by default it goes through
    Ray's AutoscalingCoordinator (`CoordinatorRequest`). An unchanged request is sent again
    once `refresh_s` has passed, since the coordinator forgets requests that are not renewed.
    """

    mode = "autoscaler"

    def __init__(self, node_types: Callable[[Mapping[str, int]], list[NodeGroup]],
                 request: Callable[[list[dict[str, float]]], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 refresh_s: float = COORDINATOR_EXPIRE_S / 3):
        self._node_types = node_types
        self._request = request or CoordinatorRequest()
        self._clock = clock
        self._refresh_s = refresh_s
        self._last: list[dict[str, float]] | None = None
        self._sent_at = -math.inf

    def groups(self, up: Mapping[str, int]) -> list[NodeGroup]:
        return self._node_types(up)

    def apply(self, plan: ScalePlan, groups: Sequence[NodeGroup],
              release: Mapping[str, list[str]], waiting: bool,
              alive_pods: Collection[str] | None = None) -> list[str]:
        bundles: list[dict[str, float]] = []
        if waiting:  # else clear: Ray's autoscaler removes the idle nodes on its own timeout
            for group in groups:
                shape = _requestable(group.shape)
                bundles += [dict(shape) for _ in range(plan.desired.get(group.name, 0))]
        now = self._clock()
        changed = bundles != self._last
        if not changed and (not bundles or now - self._sent_at < self._refresh_s):
            return []
        self._request(bundles)  # raises: nothing remembered, the next step sends it again
        self._last, self._sent_at = bundles, now
        if not changed:
            return []  # a renewal is not news for the action log
        if not bundles:
            return ["request_resources cleared"]
        counts = {g.name: plan.desired.get(g.name, 0) for g in groups}
        return ["request_resources: " + ", ".join(f"{n}×{g}" for g, n in counts.items() if n)]


class CoordinatorRequest:
    """raygang's request as requester "raygang" of Ray's AutoscalingCoordinator (blocking:
    one actor call of at most `timeout_s`). Raises on failure; the caller tries again."""

    def __init__(self, coordinator=None, expire_after_s: float = COORDINATOR_EXPIRE_S,
                 timeout_s: float = COORDINATOR_TIMEOUT_S):
        self._given = self._coordinator = coordinator  # an actor handle; None: Ray's named one
        self._expire_after_s = expire_after_s
        self._timeout_s = timeout_s
        self._direct: list[dict[str, float]] | None = None  # last sent straight to Ray

    def __call__(self, bundles: list[dict[str, float]]) -> None:
        if bundles and bundles != self._direct:
            # A new request goes out at once, before the coordinator is reached (the first
            # call creates it: a new process importing Ray Data, ~1 s); the coordinator then
            # sends the merge of every requester's bundles, raygang's included.
            from ray.autoscaler.sdk import request_resources

            request_resources(bundles=bundles)
            self._direct = bundles
        actor = self._actor(create=bool(bundles))
        if actor is None:  # no coordinator, so no request of raygang's to cancel
            return
        try:
            if not bundles:
                self._call(actor.cancel_request.remote(COORDINATOR_REQUESTER_ID))
                return
            try:
                self._call(self._send(actor, bundles))
            except ValueError:  # a live "raygang" request of other options (an older raygang)
                self._call(actor.cancel_request.remote(COORDINATOR_REQUESTER_ID))
                self._call(self._send(actor, bundles))
        except Exception:
            self._coordinator = self._given  # maybe killed for good: look it up again next time
            raise

    def _send(self, actor, bundles: list[dict[str, float]]):
        from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
            ResourceRequestPriority,
        )

        # Priority orders only the coordinator's *reservations* (which raygang never reads),
        # not what the autoscaler is asked for: every live request goes into the merge. LOW,
        # since raygang's bundles are whole nodes, busy ones too; reserving them first would
        # leave Ray Data and Train (which size themselves by their reservations) nothing.
        return actor.request_resources.remote(
            requester_id=COORDINATOR_REQUESTER_ID, resources=bundles,
            expire_after_s=self._expire_after_s, priority=ResourceRequestPriority.LOW)

    def _call(self, ref) -> None:
        ray.get(ref, timeout=self._timeout_s)

    def _actor(self, create: bool):
        """The coordinator's handle; None if it does not exist and `create` is false."""
        if self._coordinator is not None:
            return self._coordinator
        if create:
            from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
                get_or_create_autoscaling_coordinator,
            )

            self._coordinator = get_or_create_autoscaling_coordinator()
            return self._coordinator
        try:
            return ray.get_actor(_COORDINATOR[0], namespace=_COORDINATOR[1])
        except ValueError:
            return None


def _requestable(shape: Resources) -> Resources:
    """A node shape as a bundle the autoscaler can match to its node type: memory and object
    store sizes of a real node never equal the configured ones exactly, so leave them out."""
    return Resources({k: v for k, v in shape.items() if k not in _USAGE_IGNORED})


def scaler_from_config(config: ScaleConfig) -> Scaler | None:
    """The scaler of `config.mode` (None when off). Builds a Kubernetes client if needed."""
    if config.mode == "off":
        return None
    client = None
    if config.mode == "kuberay" or config.raycluster is not None:
        name = config.raycluster or os.environ.get("RAY_CLUSTER_NAME")
        if not name:
            raise ValueError("scaling.raycluster: not set, and $RAY_CLUSTER_NAME is not either")
        namespace = config.namespace or _own_namespace()
        client = RayClusterClient.from_config(namespace, name, kubeconfig=config.kubeconfig)
    if config.mode == "kuberay":
        assert client is not None
        return KubeRayScaler(client, config.costs)
    if config.node_types:
        types = config.node_types
        return AutoscalerScaler(lambda up: [NodeGroup.of_type(t, up.get(t.name, 0)) for t in types])
    assert client is not None
    costs = config.costs
    return AutoscalerScaler(lambda up: [group_of_worker(g, up.get(g.name, 0), costs.get(g.name))
                                        for g in client.worker_groups()])


def _own_namespace() -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip()
    except OSError:
        raise ValueError(
            "scaling.namespace: not set, and not running in a Kubernetes pod "
            f"({SERVICE_ACCOUNT_NAMESPACE} is missing)"
        ) from None


def in_use(node: NodeState) -> bool:
    """Whether anything (raygang's or not) holds resources on the node."""
    return any(node.free.get(k) < amount - 1e-9
               for k, amount in node.total.items() if k not in _USAGE_IGNORED)


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
                   waiting: Sequence[PendingGang], busy_nodes: Collection[str]) -> ScalePlan | None:
        """One scale decision and its requests. Errors are kept in `last_error` (the next
        step tries again); never raised, so the scheduler loop does not care."""
        try:
            if self.scaler is None:
                self.scaler = await asyncio.to_thread(scaler_from_config, self.config)
            return await self._step(observe, waiting, busy_nodes)
        except Exception as error:
            message = f"{type(error).__name__}: {error}"
            if message != self.last_error:  # once per distinct error, not every second
                log.warning("scale step failed (retried every cycle)", exc_info=True)
            self.last_error = message
            return None

    async def _step(self, observe, waiting, busy_nodes) -> ScalePlan:
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
        try:
            alive = {n.pod for n in nodes.values() if n.pod is not None}
            done = await asyncio.to_thread(self.scaler.apply, plan, groups, release,
                                           bool(plan.waiting_for), alive)
        except Exception:
            for node_id in plan.release:
                self.draining.pop(node_id, None)
            raise
        for name in plan.scaled_up:
            self.last_scale_up[name] = now
        self._remember(plan, waiting, now)
        self.groups, self.desired, self.last_plan = groups, dict(plan.desired), plan
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
        if gang_id not in plan.waiting_for:
            return None
        group, _ = plan.waiting_for[gang_id]
        request = self.requested.get(gang_id)
        if request is None or request.group != group:
            return f"waiting for nodes of group {group} already requested"
        plural = "node" if request.nodes == 1 else "nodes"
        return (f"waiting for {request.nodes} {plural} of group {group} "
                f"(requested at {_iso(request.at)})")

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


def _iso(at: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(at))


__all__ = ["AutoscalerScaler", "KubeRayScaler", "RayNode", "ScaleDriver", "Scaler",
           "group_of_worker", "in_use", "ray_nodes", "scaler_from_config"]
