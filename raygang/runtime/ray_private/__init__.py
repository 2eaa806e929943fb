"""Every private or experimental Ray API raygang uses, in one place: this package (Ray
Tune's in `tune.py`, imported here, so that every caller imports from
`raygang.runtime.ray_private`).

Each has no public equivalent in Ray 2.60; each is pinned by the `ray==2.60.0` dependency
and exercised by the integration tests, so a Ray upgrade that moves one fails here first.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ray.exceptions import GetTimeoutError, RpcError

from raygang._lazy import lazy_exports
from raygang.runtime.ray_private.tune import (
    tune_resource_manager as tune_resource_manager,
    tune_trial_in_group as tune_trial_in_group,
)

if TYPE_CHECKING:  # (`X as X`: the Train classes are exported, lazily; see below)
    from ray.serve._private.client import ServeControllerClient
    from ray.train.v2._internal.execution.callback import (
        ControllerCallback as ControllerCallback,
        WorkerGroupCallback as WorkerGroupCallback,
    )
    from ray.train.v2._internal.execution.scaling_policy import (
        NoopDecision as NoopDecision,
        ResizeDecision as ResizeDecision,
        ScalingDecision as ScalingDecision,
        ScalingPolicy as ScalingPolicy,
    )

# What a GCS call raises when the GCS does not answer (mostly it waits: `gcs_reconnect_s`)
GCS_DOWN = (RpcError, GetTimeoutError, ConnectionError, TimeoutError)


def gcs_reconnect_s() -> float:
    """How long this process's Ray waits for a GCS that does not answer (then exits), as
    its core reads it: 60 s by default; KubeRay: 600 on worker pods with GCS FT."""
    return float(os.environ.get("RAY_gcs_rpc_server_reconnect_timeout_s") or 60)


# Ray Train V2's controller calls its callbacks and its scaling policy through these classes,
# which only `ray.train.v2._internal` defines in Ray 2.60 (`RaygangTrain` subclasses them).
# Loaded when first asked for, so that importing this module does not import Ray Train.
_TRAIN_EXECUTION = "ray.train.v2._internal.execution"
__getattr__ = lazy_exports(__name__, {
    "ControllerCallback": f"{_TRAIN_EXECUTION}.callback",
    "WorkerGroupCallback": f"{_TRAIN_EXECUTION}.callback",
    "NoopDecision": f"{_TRAIN_EXECUTION}.scaling_policy",
    "ResizeDecision": f"{_TRAIN_EXECUTION}.scaling_policy",
    "ScalingDecision": f"{_TRAIN_EXECUTION}.scaling_policy",
    "ScalingPolicy": f"{_TRAIN_EXECUTION}.scaling_policy",
}, globals())


def available_resources_per_node() -> dict[str, dict[str, float]]:
    """Free resources per alive node as the GCS sees them (`ray.available_resources()`
    only sums them over the cluster)."""
    from ray._private import state

    return state.available_resources_per_node()


def placement_group(pg_id_hex: str) -> Any:
    """A handle to an existing placement group by its id (Ray finds them only by name,
    and a name is unique only within the namespace that created it)."""
    from ray._raylet import PlacementGroupID
    from ray.util.placement_group import PlacementGroup

    return PlacementGroup(PlacementGroupID(bytes.fromhex(pg_id_hex)))


def import_attr(path: str) -> Any:
    """`"pkg.module:attr"` (or `pkg.module.attr`) imported, as Ray Serve resolves an
    application's `import_path`."""
    from ray._common.utils import import_attr as ray_import_attr

    return ray_import_attr(path)


def gcs_kv_client() -> Any:
    """The GCS client with async key-value calls (`ray.experimental.internal_kv`)."""
    from ray.experimental.internal_kv import internal_kv_get_gcs_client

    return internal_kv_get_gcs_client()


def node_alive(node_id_hex: str, timeout_s: float) -> bool:
    """Whether the GCS counts the node as alive: its `CheckAlive` call (~0.4 ms here), the
    one Ray's own processes make; the public `ray.nodes()` sends every node's record.
    Raises if the GCS does not answer within `timeout_s`."""
    from ray._private.worker import global_worker
    from ray._raylet import NodeID

    gcs = global_worker.gcs_client  # type: ignore[attr-defined]  # set by ray.init
    (alive,) = gcs.check_alive([NodeID.from_hex(node_id_hex)], timeout=timeout_s)
    return bool(alive)


def actor_unplaced(actor_id_hex: str) -> bool:
    """Whether the GCS has the actor waiting for its creation with no process of its own
    yet (PENDING_CREATION, no pid): one whose constructor runs has a process. Blocking.
    Ray 2.60 loses an actor's creation when its GCS dies while scheduling it: the actor
    stays so after the GCS returns, and never starts (bench/head_faults.py found it)."""
    from ray._private.state import state

    info = state.actor_table(actor_id_hex)
    return bool(info) and info.get("State") == "PENDING_CREATION" and not info.get("Pid")


def unplaced_actors_of(owner_actor_id_hex: str, class_name: str) -> dict[str, str | None]:
    """The actors of class `class_name` that actor `owner_actor_id_hex` made and the GCS
    has waiting for their creation with no process (as `actor_unplaced`), by id, each with
    the placement group it is to be created in (None: none): a Ray Train controller's
    workers whose creation the GCS lost. Blocking: two GCS reads (the public actor table
    leaves out an actor's placement group)."""
    from ray._private.state import state
    from ray.core.generated import gcs_pb2

    owner = (state.actor_table(owner_actor_id_hex) or {}).get("Address") or {}
    if not owner.get("Port"):
        return {}
    found: dict[str, str | None] = {}
    for raw in state._connect_and_get_accessor().get_actor_table(None, "PENDING_CREATION"):
        actor = gcs_pb2.ActorTableData.FromString(raw)  # type: ignore[attr-defined]
        if actor.class_name == class_name and not actor.pid and (
                actor.owner_address.ip_address, actor.owner_address.port) == (
                owner.get("IPAddress"), owner["Port"]):
            found[actor.actor_id.hex()] = actor.placement_group_id.hex() or None
    return found


async def job_status(submission_id: str, timeout_s: float = 30) -> str | None:
    """A Ray job's status ("PENDING", "RUNNING", "SUCCEEDED"...; None: no such job) as Ray's
    job manager keeps it in the GCS: what `JobSubmissionClient.get_job_status` reads
    through the dashboard, without an HTTP connection per call (polling every running job
    that way cost the scheduler more than everything else it does under a burst of jobs)."""
    key, namespace = _job_info_key(submission_id)
    info = await gcs_kv_client().async_internal_kv_get(key, namespace=namespace,
                                                       timeout=timeout_s)
    return _status_of(info)


def job_status_now(submission_id: str) -> str | None:
    """`job_status`, blocking (for code that is not async)."""
    key, namespace = _job_info_key(submission_id)
    return _status_of(gcs_kv_client().internal_kv_get(key, namespace))


def _job_info_key(submission_id: str) -> tuple[bytes, bytes]:
    from ray._private.ray_constants import KV_NAMESPACE_JOB
    from ray.dashboard.modules.job.common import JobInfoStorageClient

    return JobInfoStorageClient.JOB_DATA_KEY.format(job_id=submission_id).encode(), \
        KV_NAMESPACE_JOB


def _status_of(info: bytes | None) -> str | None:
    import json

    return None if info is None else str(json.loads(info)["status"])


def canonicalize_bootstrap_address(address: str) -> str | None:
    """`auto` or host:port as the GCS address `ray.init` would use (None: no cluster)."""
    from ray._private.services import canonicalize_bootstrap_address as canonical

    return canonical(address)


def node_instance_ids(gcs_address: str) -> dict[str, str]:
    """The instance id (a KubeRay pod's name) of each node that has one, as the autoscaler
    state in the GCS keeps it (`ray status` reads it so; `autoscaler.v2.sdk` is not public)."""
    from ray.autoscaler.v2.sdk import get_cluster_status

    status = get_cluster_status(gcs_address)
    return {node.node_id: node.instance_id
            for node in [*status.active_nodes, *status.idle_nodes]
            if node.node_id and node.instance_id}


# Ray's AutoscalingCoordinator (Ray Data's; Train's too) ----------------------------------
def autoscaling_coordinator() -> Any:
    """The handle of Ray's AutoscalingCoordinator actor, created if none runs: it merges
    every requester's bundles into one `request_resources` (Ray Data and Train call it every
    20 s, replacing any request made around it)."""
    from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
        get_or_create_autoscaling_coordinator,
    )

    return get_or_create_autoscaling_coordinator()


def coordinator_low_priority() -> Any:
    """The coordinator's `ResourceRequestPriority.LOW`."""
    from ray.data._internal.cluster_autoscaler.base_autoscaling_coordinator import (
        ResourceRequestPriority,
    )

    return ResourceRequestPriority.LOW


# Ray Serve ---------------------------------------------------------------------------------
def serve_ingress_deployment(app: Any) -> Any:
    """An Application's ingress deployment: no public accessor; `_bound_deployment` is the
    attribute Serve's own `build_app` reads (there since 2.7)."""
    return app._bound_deployment


def serve_rebuild(app: Any, change: Callable[[str, Any], Any]) -> Any:
    """A copy of application `app` in which every deployment of its graph is
    `change(name, deployment)`, named as Serve's `build_app` names it: its own name, then
    `<name>_1`, `<name>_2`... for later ones of the same name, children before parents
    (the rebuilt deployments carry that name, so Serve names them the same). An
    application bound into another's init args is one deployment, however often it
    appears. Bind args are kept; `app` is left unchanged.

    Serve has no public way to walk a graph: its `build_app` finds the applications in
    init args with Ray's `_PyObjScanner` (a pickler), as this does."""
    from ray.dag.py_obj_scanner import _PyObjScanner
    from ray.serve import Application

    rebuilt: dict[int, Any] = {}
    taken: set[str] = set()

    def visit(node: Any) -> Any:
        if id(node) in rebuilt:
            return rebuilt[id(node)]
        deployment = node._bound_deployment
        scanner: Any = _PyObjScanner(source_type=Application)
        try:
            children = scanner.find_nodes((deployment.init_args, deployment.init_kwargs))
            table = {child: visit(child) for child in children}
            args, kwargs = scanner.replace_nodes(table)
        finally:
            scanner.clear()
        name, n = deployment.name, 1
        while name in taken:
            name, n = f"{deployment.name}_{n}", n + 1
        taken.add(name)
        copy = deployment.options(name=name, _init_args=args, _init_kwargs=kwargs)
        rebuilt[id(node)] = Application(change(name, copy))
        return rebuilt[id(node)]

    root = visit(app)
    root._ingress_request_router = getattr(app, "_ingress_request_router", None)  # kept
    return root


def serve_deployment_options(deployment: Any) -> dict[str, Any]:
    """A deployment's replica count (None when Serve autoscales it, with its bounds), what
    its actor asks for, and its placement group's bundles and strategy: read from its
    configs, which have no public accessor for all of these."""
    replica, config = deployment._replica_config, deployment._deployment_config
    auto = config.autoscaling_config
    return {
        "replicas": None if auto is not None else deployment.num_replicas,
        "min_replicas": auto.min_replicas if auto is not None else None,
        "max_replicas": auto.max_replicas if auto is not None else None,
        "actor": dict(replica.resource_dict),
        "bundles": replica.placement_group_bundles,
        "strategy": replica.placement_group_strategy,
    }


def serve_forget_controller() -> None:
    """Drop the Serve controller handle Serve caches per process and job (it points at a
    dead controller after someone else's `serve.shutdown()`)."""
    from ray.serve import context

    context._disconnect()


def serve_run_without_waiting(app: Any, name: str, route_prefix: str,
                              external_scaler_enabled: bool = False) -> None:
    """Deploy `app`, returning once its ingress deployment is registered with the
    controller: `serve.run(blocking=False)` still waits until the app is RUNNING (its
    `blocking` only means "then wait for Ctrl-C"); `_run(_blocking=False)` is underscored
    but marked PublicAPI."""
    from ray import serve

    serve._run(app, _blocking=False, name=name, route_prefix=route_prefix,
               external_scaler_enabled=external_scaler_enabled)


def serve_details() -> dict:
    """`ServeInstanceDetails` as a dict (what `serve status` and the dashboard read: each
    replica's node); the client that reads it has no public accessor."""
    return _serve_client().get_serve_details()


def serve_set_replicas(app_name: str, deployment: str, replicas: int) -> None:
    """Set a deployment's replica count without restarting its replicas (the app must run
    with `external_scaler_enabled`): the controller call behind the dashboard's public
    `POST /api/v1/applications/{app}/deployments/{deployment}/scale`, which needs the
    dashboard's HTTP server and token; this needs neither."""
    import ray
    from ray.serve._private.common import DeploymentID

    controller = _serve_client()._controller
    ray.get(controller.update_deployment_replicas.remote(
        DeploymentID(name=deployment, app_name=app_name), replicas))


def serve_http_port() -> int:
    """The port of the running Serve's HTTP proxies (no public accessor)."""
    return _serve_client().http_config.port


def _serve_client() -> ServeControllerClient:
    """The client of the running Serve controller (it raises if none runs)."""
    from ray.serve.context import _get_global_client

    client = _get_global_client()
    assert client is not None  # None only when not asked to raise
    return client


# Ray Train V2's controller ---------------------------------------------------------------
def train_controller() -> Any:
    """The `TrainController` this process runs (a Train callback runs inside it), or None:
    Train hands its callbacks no controller; a Ray actor's instance is the worker's
    `actors[actor_id]` from the start of its `__init__` on."""
    import ray

    worker = ray._private.worker.global_worker
    controller = worker.actors.get(worker.actor_id) if worker.actor_id else None
    return controller if hasattr(controller, "_scaling_policy") else None


def train_replace_scaling_policy(controller: Any, make: Callable[[Any], Any]) -> Any:
    """Put `make(scaling_config)` in place of the controller's scaling policy (which Train
    builds from its ScalingConfig, with no way to pass one in) and return it. Train calls
    it as `_scaling_policy` and as its first controller callback; the new one keeps the
    old one's AutoscalingCoordinator request, so that its cancel at shutdown still runs."""
    old = controller._scaling_policy
    callbacks = controller._controller_callbacks  # the list its CallbackManager invokes
    if old not in callbacks:
        raise RuntimeError("the Train controller's scaling policy is not among its callbacks")
    policy = make(old.scaling_config)
    policy._requester_id = old._requester_id
    policy._coordinator_client = old._coordinator_client
    callbacks[callbacks.index(old)] = policy
    controller._scaling_policy = policy
    return policy


def train_stop_worker_group(controller: Any) -> None:
    """Shut down the controller's worker group if it still has one (Train keeps a failed
    or preempted group until it starts the next: raygang frees that group's capacity
    only once it is gone, before the next is sized)."""
    if controller._worker_group is not None:
        controller._shutdown_worker_group()


# Placement groups and actors by id ---------------------------------------------------------
def group_nodes(pg_id_hex: str) -> list[str | None] | None:
    """The node of each bundle of placement group `pg_id_hex` (None for a bundle not placed),
    or None if the group is unknown or removed (`placement_group_table` is public, but a
    group by id is not; see `placement_group`)."""
    from ray.util.placement_group import placement_group_table

    info = placement_group_table(placement_group(pg_id_hex))
    if not info or info.get("state") in (None, "REMOVED"):
        return None
    placed = info.get("bundles_to_node_id") or {}
    return [placed.get(i) for i in range(len(info.get("bundles") or {}))]


def actor_state(actor_id_hex: str) -> str | None:
    """The GCS's state of an actor by id ("ALIVE", "RESTARTING", "DEAD"...), None if it is
    unknown: the State API needs the dashboard, this does not."""
    from ray._private import state

    info = state.actors(actor_id_hex)
    return info.get("State") if info else None


# A requester (the process that alone claims a hand-off gang) is a Train controller's actor
# id, or "job:<id>": a driver (a Tune sweep's), which is no actor
JOB_REQUESTER = "job:"
JOBS_READ_S = 2.0
_ENDED_JOBS: dict[str, Any] = {"at": float("-inf"), "ended": frozenset()}


def dead_requesters(requesters: set[str]) -> set[str]:
    """Those of `requesters` the GCS knows to be dead: an actor DEAD, a driver's job ended
    (Ray marks it so when the driver's process exits, killed or not). Blocking: with
    drivers among them, at most one read of the job table every JOBS_READ_S."""
    from ray._private.state import state

    jobs = {r for r in requesters if r.startswith(JOB_REQUESTER)}
    dead = {r for r in requesters - jobs if actor_state(r) == "DEAD"}
    if jobs - _ENDED_JOBS["ended"] and time.monotonic() - _ENDED_JOBS["at"] > JOBS_READ_S:
        # Read at most every JOBS_READ_S (every trial's session asks each second): a job
        # once ended stays so
        _ENDED_JOBS["ended"] = frozenset(JOB_REQUESTER + j["JobID"]
                                         for j in state.job_table() if j["IsDead"])
        _ENDED_JOBS["at"] = time.monotonic()
    return dead | (jobs & _ENDED_JOBS["ended"])


def dashboard_url() -> str | None:
    """The dashboard's address (the Job Submission API's) of the connected cluster, as the
    dashboard registers it in the GCS (any process of the cluster can read it), or None if
    the cluster runs without a dashboard."""
    from ray._private import ray_constants
    from ray.experimental.internal_kv import _internal_kv_get

    address = _internal_kv_get(ray_constants.DASHBOARD_ADDRESS,
                               namespace=ray_constants.KV_NAMESPACE_DASHBOARD)
    if not address:
        return None
    url = address.decode()
    return url if url.startswith("http") else f"http://{url}"
