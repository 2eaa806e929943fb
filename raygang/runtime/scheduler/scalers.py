"""The two ways raygang grows and shrinks a cluster (`scaling.ScaleDriver` applies a
plan through exactly one of them):

- `KubeRayScaler` (mode `kuberay`) patches the RayCluster: a worker group's `replicas` to
  grow it, `scaleStrategy.workersToDelete` (naming pods) to remove specific idle nodes.
- `AutoscalerScaler` (mode `autoscaler`) requests the whole desired cluster as node-shaped
  bundles through Ray's AutoscalingCoordinator (`CoordinatorRequest`), and clears it when
  no gang waits for a node; Ray's autoscaler then removes idle nodes itself.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Protocol

import ray

from raygang.control.config import ScaleConfig
from raygang.core.resources import Resources
from raygang.core.scale import NodeGroup, ScalePlan
from raygang.kuberay.client import RayClusterClient
from raygang.kuberay.groups import WorkerGroup
from raygang.runtime.names import COORDINATOR_REQUESTER_ID
from raygang.runtime.ray_private import autoscaling_coordinator, coordinator_low_priority

log = logging.getLogger(__name__)

SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
# Resources that say nothing about whether a node is in use (Ray reserves memory and
# object store per node; they do not go to zero on an idle node).
USAGE_IGNORED = ("memory", "object_store_memory")


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
        for worker in self._groups.values():  # pods deleted since: off the list (see client)
            if alive is None:
                break
            gone = [p for p in worker.workers_to_delete if p not in alive]
            if gone and worker.name not in release:
                self.client.forget_deleted_workers(worker.name, alive)
                done.append(f"{worker.name}: workersToDelete -= {', '.join(gone)} (deleted)")
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


class RequestOut(Exception):
    """The request reached Ray's autoscaler, but the coordinator that keeps it there (it
    sends the merge of its requesters' requests every tick) was not told: the request is
    news now, and the coordinator is told at the next step."""


class AutoscalerScaler:
    """Mode `autoscaler`: Ray's autoscaler launches and removes nodes; raygang says how
    many of each type the queue needs.

    `request` sends the whole request (an empty list clears it); by default it goes through
    Ray's AutoscalingCoordinator (`CoordinatorRequest`). An unchanged request is sent again
    once `refresh_s` has passed, since the coordinator forgets requests that are not renewed.

    The request is cleared `hold_s` (the config's `scale_down_delay_s`) after the last step
    that had a gang waiting for nodes, not at once: the step the requested nodes are up, the
    gang is admitted and its placement group created, and Ray's autoscaler, reading node
    idleness seconds late, would otherwise see new, "idle" nodes nobody asks for and remove
    them under the gang it just started.
    """

    mode = "autoscaler"

    def __init__(self, node_types: Callable[[Mapping[str, int]], list[NodeGroup]],
                 request: Callable[[list[dict[str, float]]], None] | None = None,
                 clock: Callable[[], float] = time.monotonic,
                 refresh_s: float = COORDINATOR_EXPIRE_S / 3, hold_s: float = 0.0):
        self._node_types = node_types
        self._request = request or CoordinatorRequest()
        self._clock = clock
        self._refresh_s = refresh_s
        self._last: list[dict[str, float]] | None = None
        self._sent_at = -math.inf
        self._announced: list[dict[str, float]] | None = None  # in the action log last
        self._hold_s = hold_s
        self._needed_at = -math.inf  # the last step a gang waited for nodes
        self._needed: list[dict[str, float]] = []  # what that step asked for

    def groups(self, up: Mapping[str, int]) -> list[NodeGroup]:
        return self._node_types(up)

    def apply(self, plan: ScalePlan, groups: Sequence[NodeGroup],
              release: Mapping[str, list[str]], waiting: bool,
              alive_pods: Collection[str] | None = None) -> list[str]:
        bundles: list[dict[str, float]] = []
        now = self._clock()
        if waiting:
            for group in groups:
                shape = _requestable(group.shape)
                bundles += [dict(shape) for _ in range(plan.desired.get(group.name, 0))]
            self._needed_at, self._needed = now, bundles
        elif now - self._needed_at < self._hold_s:
            bundles = self._needed  # held a while (class doc), then cleared: Ray's
            # autoscaler removes the idle nodes on its own timeout
        changed = bundles != self._last
        if not changed and (not bundles or now - self._sent_at < self._refresh_s):
            return []
        try:
            self._request(bundles)  # raises: nothing remembered, the next step sends it again
        except RequestOut as out:  # out, yet to be sent again: the step still did it
            log.warning("%s (told again at the next step)", out)
            self._last = None
        else:
            self._last, self._sent_at = bundles, now
        if not changed or bundles == self._announced:
            return []  # a renewal, or a resend of a request out already: not news
        self._announced = bundles
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
        elif not bundles:  # a clear: the coordinator's merge replaces what was sent directly
            self._direct = None
        try:
            self._tell_coordinator(bundles)
        except Exception as error:
            if bundles:  # sent straight to Ray's autoscaler above (this step or an earlier one)
                raise RequestOut(f"the autoscaling coordinator did not take the request: "
                                 f"{error!r}") from error
            raise

    def _tell_coordinator(self, bundles: list[dict[str, float]]) -> None:
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
        # Priority orders only the coordinator's *reservations* (which raygang never reads),
        # not what the autoscaler is asked for: every live request goes into the merge. LOW,
        # since raygang's bundles are whole nodes, busy ones too; reserving them first would
        # leave Ray Data and Train (which size themselves by their reservations) nothing.
        return actor.request_resources.remote(
            requester_id=COORDINATOR_REQUESTER_ID, resources=bundles,
            expire_after_s=self._expire_after_s, priority=coordinator_low_priority())

    def _call(self, ref) -> None:
        ray.get(ref, timeout=self._timeout_s)

    def _actor(self, create: bool):
        """The coordinator's handle; None if it does not exist and `create` is false."""
        if self._coordinator is not None:
            return self._coordinator
        if create:
            self._coordinator = autoscaling_coordinator()
            return self._coordinator
        try:
            return ray.get_actor(_COORDINATOR[0], namespace=_COORDINATOR[1])
        except ValueError:
            return None


def _requestable(shape: Resources) -> Resources:
    """A node shape as a bundle the autoscaler can match to its node type: memory and object
    store sizes of a real node never equal the configured ones exactly, so leave them out."""
    return Resources({k: v for k, v in shape.items() if k not in USAGE_IGNORED})


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
        return AutoscalerScaler(lambda up: [NodeGroup.of_type(t, up.get(t.name, 0)) for t in types],
                                hold_s=config.scale_down_delay_s)
    assert client is not None
    costs = config.costs
    return AutoscalerScaler(lambda up: [group_of_worker(g, up.get(g.name, 0), costs.get(g.name))
                                        for g in client.worker_groups()],
                            hold_s=config.scale_down_delay_s)


def _own_namespace() -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip()
    except OSError:
        raise ValueError(
            "scaling.namespace: not set, and not running in a Kubernetes pod "
            f"({SERVICE_ACCOUNT_NAMESPACE} is missing)"
        ) from None
