"""A small test-side stand-in of the KubeRay operator: RayCluster spec -> Ray nodes.

`FakeKubeRayOperator` polls one RayCluster stored in a `KubeStandIn` (tests/kube_standin.py)
and makes a `ray.cluster_utils.Cluster` match its worker groups, the way KubeRay's
RayCluster reconciler makes worker Pods match them. A "pod" here is one Ray node started with
`cluster.add_node(...)`, shaped as `WorkerGroup.from_spec` reads the group, with what a real
KubeRay worker pod gives Ray: the env `RAY_NODE_TYPE_NAME=<group>` and
`RAY_CLOUD_INSTANCE_ID=<pod name>` and the node label `ray.io/node-group=<group>`.

What it follows, per worker group, is `reconcilePods` in KubeRay v1.x
(ray-operator/controllers/ray/raycluster_controller.go, ray-project/kuberay):

1. A suspended group (`suspend: true`) loses all its pods, and nothing else happens to it.
2. Every name in `scaleStrategy.workersToDelete` is deleted, "regardless of the value of
   Replicas"; a name that is not there (already gone) is skipped (`errors.IsNotFound`).
   KubeRay deletes the pod *by name in the namespace*, so a name listed under one group
   removes that pod whichever group it is in; so does this stand-in.
3. workersToDelete is NOT cleared in the stored RayCluster. The reconciler only does
   `worker.ScaleStrategy.WorkersToDelete = []string{}` on its loop-local copy of the group
   spec (`for _, worker := range instance.Spec.WorkerGroupSpecs`) and never writes the spec
   (kuberay PR #726: "the operator does **not** currently write to spec or clean up
   workersToDelete"; issue #733 "Clean up workersToDelete?" is still open). Whoever wrote
   the list clears it: Ray's autoscaler does, once the pods are gone
   (`KubeRayNodeProvider.safe_to_scale` in ray/autoscaler/_private/kuberay/node_provider.py,
   `worker_groups_without_pending_deletes` in ray/autoscaler/v2/.../kuberay/cloud_provider.py).
   So this stand-in never writes to the RayCluster at all; `history` shows what it read.
4. The target is `utils.GetWorkerGroupDesiredReplicas` x `numOfHosts` (at least 1): replicas
   clamped into [minReplicas, maxReplicas] (a missing replicas counts as minReplicas; if
   minReplicas > maxReplicas, maxReplicas wins). So KubeRay *does* act on minReplicas: a group
   with replicas 0 and minReplicas 1 gets one pod, though the field still says 0.
5. Fewer pods than the target (pods just deleted in step 2 not counted): create the
   difference, all in this pass.
6. More pods than the target: without in-tree autoscaling (`spec.enableInTreeAutoscaling`
   not true) KubeRay deletes the first `-diff` pods of its list, an arbitrary ("random")
   choice; with autoscaling on it deletes nothing unless the operator runs with
   `ENABLE_RANDOM_POD_DELETE=true` ("making Autoscaler the sole decision-maker for Pod
   deletions"). Here the list is shuffled with `rng`, and `enable_random_pod_delete`
   defaults to that environment variable, as KubeRay reads it.

Not modelled: unhealthy pods (KubeRay deletes Failed/Succeeded worker pods and recreates
them next pass; a dead Ray node here stays a pod until deleted), the head group, the
status subresource (KubeRay's status writes also bump resourceVersion), per-replica host
groups of multi-host groups (numOfHosts only multiplies the pod count), and the scale
"expectations" cache (creations and deletions here are synchronous, so there is nothing
to wait for). A pod exists once its Ray node has joined: `add_node` returns after the
node registered with the GCS, a few seconds on a small machine, and the reconcile thread
does nothing else meanwhile.

Run as `python -m tests.kuberay_operator`: a self-test scenario on its own `Cluster` that
prints one JSON line of observations (tests/integration/test_kuberay_operator.py runs it
in a subprocess, so that it does not clash with the test session's Ray driver).
"""

from __future__ import annotations

import atexit
import math
import os
import random
import string
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ray.cluster_utils import Cluster

from raygang.kuberay.groups import DEFAULT_NUM_OF_HOSTS, WorkerGroup
from tests.kube_standin import KubeStandIn

NODE_GROUP_LABEL = "ray.io/node-group"
# Ray's own resources with their own `add_node` arguments; the rest go in `resources`.
_BUILTIN = ("CPU", "GPU", "memory", "object_store_memory")


@dataclass(frozen=True)
class PodEvent:
    """A pod created or deleted by the operator (or killed through `kill_pod`)."""

    time: float  # time.monotonic()
    action: str  # "created" | "deleted"
    group: str
    pod: str
    node_id: str
    # created: "scale-up"; deleted: "workersToDelete", "random", "suspend", "killed"
    reason: str


@dataclass
class _Pod:
    name: str
    group: str
    node: Any  # ray._private.node.Node
    created: float = field(default_factory=time.monotonic)

    @property
    def node_id(self) -> str:
        return self.node.node_id


def desired_pods(spec: dict[str, Any]) -> int:
    """Pods KubeRay wants for one `workerGroupSpecs[]` entry: `GetWorkerGroupDesiredReplicas`
    (ray-operator/controllers/ray/utils/util.go) times `numOfHosts` (at least 1)."""
    if spec.get("suspend"):
        return 0
    low = int(spec.get("minReplicas", 0))
    high = int(spec.get("maxReplicas", 2**31 - 1))
    replicas = spec.get("replicas")
    if low > high:
        wanted = high
    elif replicas is None or int(replicas) < low:
        wanted = low
    elif int(replicas) > high:
        wanted = high
    else:
        wanted = int(replicas)
    return wanted * max(1, int(spec.get("numOfHosts", DEFAULT_NUM_OF_HOSTS)))


def node_args(group: WorkerGroup) -> dict[str, Any]:
    """`Cluster.add_node` arguments for one Ray node of `group` (without labels and env).

    KubeRay passes `--num-cpus`/`--num-gpus` from rayStartParams or the container limits,
    rounded up (`resource.Quantity.Value()`); with neither, Ray would detect the host's
    CPUs, and `Cluster`'s default (1 CPU) stands in for that.
    """
    shape = group.resources
    args: dict[str, Any] = {"num_gpus": int(math.ceil(shape.get("GPU", 0.0)))}
    if "CPU" in shape or "num-cpus" in group.ray_start_params:
        args["num_cpus"] = int(math.ceil(shape.get("CPU", 0.0)))
    if "memory" in shape:
        args["memory"] = int(shape["memory"])
    custom = {k: v for k, v in shape.items() if k not in _BUILTIN}
    if custom:
        args["resources"] = custom
    return args


class FakeKubeRayOperator:
    """Reconciles the worker groups of RayCluster `namespace/name` in `standin` onto `cluster`.

    Start with `with FakeKubeRayOperator(...) as op:` (or `start()`/`stop()`). Everything it
    observes or does is recorded: `history` (each change of a group's `replicas` field it
    read), `events` (pods created and deleted) and `errors` (exceptions of its thread, which
    keeps going).
    """

    def __init__(
        self,
        standin: KubeStandIn,
        cluster: Cluster,
        namespace: str,
        name: str,
        poll_s: float = 0.2,
        *,
        enable_random_pod_delete: bool | None = None,
        rng: random.Random | None = None,
    ):
        self.standin = standin
        self.cluster = cluster
        self.namespace = namespace
        self.name = name
        self.poll_s = poll_s
        if enable_random_pod_delete is None:  # KubeRay reads it from its own environment
            enable_random_pod_delete = (
                os.environ.get("ENABLE_RANDOM_POD_DELETE", "").lower() == "true")
        self.enable_random_pod_delete = enable_random_pod_delete
        self.rng = rng or random.Random()
        self.history: list[tuple[float, str, int]] = []
        self.events: list[PodEvent] = []
        self.errors: list[BaseException] = []
        self.passes = 0  # completed reconcile passes
        self._pods: dict[str, _Pod] = {}
        self._replicas_seen: dict[str, int | None] = {}
        self._lock = threading.Lock()  # guards _pods; held briefly
        self._cluster_lock = threading.Lock()  # serializes calls on `cluster` (seconds)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # Lifecycle ---------------------------------------------------------------------
    def start(self) -> FakeKubeRayOperator:
        if self._thread is not None:
            raise RuntimeError("already started")
        self._thread = threading.Thread(
            target=self._run, name=f"fake-kuberay-{self.name}", daemon=True)
        atexit.register(self._kill_at_exit)
        self._thread.start()
        return self

    def stop(self, timeout: float = 120.0) -> None:
        """Stop the reconcile thread (after a node it is adding has joined); pods stay."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise TimeoutError(f"operator thread still running after {timeout}s")

    def _kill_at_exit(self) -> None:
        """At interpreter exit: kill what is left of this operator's nodes (normally
        nothing, `cluster.shutdown()` having removed them)."""
        with self._lock:
            nodes = [p.node for p in self._pods.values()]
        for node in nodes:
            try:
                if node.any_processes_alive():
                    node.kill_all_processes(check_alive=False, allow_graceful=False)
            except Exception:  # noqa: BLE001 - best effort at exit
                pass

    def __enter__(self) -> FakeKubeRayOperator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # Reads -------------------------------------------------------------------------
    def pods(self, group: str | None = None) -> list[str]:
        """Names of the pods alive now (of `group`, if given), oldest first."""
        with self._lock:
            pods = sorted(self._pods.values(), key=lambda p: p.created)
        return [p.name for p in pods if group is None or p.group == group]

    def node_of(self, pod: str) -> str:
        """The Ray node id (hex) of a live pod; KeyError if there is no such pod."""
        with self._lock:
            return self._pods[pod].node_id

    def pod_of(self, node_id: str) -> str | None:
        with self._lock:
            for pod in self._pods.values():
                if pod.node_id == node_id:
                    return pod.name
        return None

    def wait_for(self, predicate: Callable[[], Any], timeout: float = 30.0,
                 interval: float = 0.05, what: str = "condition") -> Any:
        """Poll `predicate` until it is truthy (and return its value) or raise TimeoutError."""
        deadline = time.monotonic() + timeout
        while True:
            value = predicate()
            if value:
                return value
            if time.monotonic() > deadline:
                errors = list(dict.fromkeys(repr(e) for e in self.errors))
                raise TimeoutError(f"{what} not met in {timeout}s; pods={self.pods()} "
                                   f"errors ({len(self.errors)}): {errors[:3]}")
            time.sleep(interval)

    def wait_passes(self, n: int = 2, timeout: float = 30.0) -> None:
        """Wait until `n` more reconcile passes have completed (each reads the spec afresh)."""
        target = self.passes + n
        self.wait_for(lambda: self.passes >= target, timeout, what=f"{n} reconcile passes")

    # Test hooks --------------------------------------------------------------------
    def kill_pod(self, pod: str) -> None:
        """`kubectl delete pod`: the pod goes away behind the operator's back; the next pass
        sees fewer pods than wanted and creates a new one, as KubeRay would."""
        with self._lock:
            gone = self._forget(self._pods[pod], "killed")
        self._remove([gone])

    # Reconciling -------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.reconcile()
            except Exception as exc:  # noqa: BLE001 - recorded; the thread keeps going
                exc.__traceback_text__ = traceback.format_exc()  # type: ignore[attr-defined]
                self.errors.append(exc)
            self.passes += 1
            self._stop.wait(self.poll_s)

    def reconcile(self) -> None:
        """One pass over the stored RayCluster, as KubeRay's `reconcilePods` does it."""
        cluster_obj = self.standin.get(self.namespace, self.name)
        spec = cluster_obj.get("spec") or {}
        autoscaling = spec.get("enableInTreeAutoscaling") is True
        rv = cluster_obj["metadata"]["resourceVersion"]
        for group_spec in spec.get("workerGroupSpecs") or []:
            if self._stop.is_set():
                return
            self._note_replicas(group_spec)
            self._reconcile_group(WorkerGroup.from_spec(group_spec, rv), group_spec, autoscaling)

    def _note_replicas(self, group_spec: dict[str, Any]) -> None:
        group, replicas = group_spec["groupName"], group_spec.get("replicas")
        if group not in self._replicas_seen or self._replicas_seen[group] != replicas:
            self._replicas_seen[group] = replicas
            self.history.append((time.monotonic(), group, -1 if replicas is None else replicas))

    def _reconcile_group(self, group: WorkerGroup, group_spec: dict[str, Any],
                         autoscaling: bool) -> None:
        gone: list[_Pod] = []
        with self._lock:
            if group_spec.get("suspend"):
                gone = [self._forget(p, "suspend") for p in self._group_pods(group.name)]
                diff = 0
            else:
                # Always remove the listed workers, whatever `replicas` says; gone ones are
                # skipped. The list itself stays in the spec (see the module docstring).
                for name in group.workers_to_delete:
                    if name in self._pods:
                        gone.append(self._forget(self._pods[name], "workersToDelete"))
                running = self._group_pods(group.name)
                diff = desired_pods(group_spec) - len(running)
                if diff < 0 and (not autoscaling or self.enable_random_pod_delete):
                    self.rng.shuffle(running)
                    gone += [self._forget(p, "random") for p in running[:-diff]]
        self._remove(gone)
        for _ in range(max(diff, 0)):
            if self._stop.is_set():
                return
            self._create(group)

    def _group_pods(self, group: str) -> list[_Pod]:
        return sorted((p for p in self._pods.values() if p.group == group),
                      key=lambda p: p.created)

    def _create(self, group: WorkerGroup) -> None:
        with self._lock:
            taken = set(self._pods)
        while True:  # KubeRay: `<cluster>-<group>-worker-` + a 5-character random suffix
            name = f"{self.name}-{group.name}-worker-" + "".join(
                self.rng.choices(string.ascii_lowercase, k=5))
            if name not in taken:
                break
        with self._cluster_lock:  # seconds: the node joins before add_node returns
            # Off the main thread, `Node(shutdown_at_exit=True)` fails: it installs a SIGTERM
            # handler (signal.signal works in the main thread only). Its other half, kernel
            # fate-sharing (PR_SET_PDEATHSIG), would kill the node when *this thread* ends,
            # the kernel's "parent" being the spawning thread. So nodes start without both;
            # `cluster.shutdown()` removes them, and `_kill_at_exit` stands in for the atexit
            # hook that was left out.
            shutdown_at_exit = self.cluster._shutdown_at_exit
            self.cluster._shutdown_at_exit = False
            try:
                node = self.cluster.add_node(
                    **node_args(group),
                    labels={NODE_GROUP_LABEL: group.name},
                    env_vars={"RAY_CLOUD_INSTANCE_ID": name, "RAY_NODE_TYPE_NAME": group.name},
                )
            finally:
                self.cluster._shutdown_at_exit = shutdown_at_exit
        pod = _Pod(name, group.name, node)
        with self._lock:
            self._pods[name] = pod
        self.events.append(
            PodEvent(time.monotonic(), "created", group.name, name, pod.node_id, "scale-up"))

    def _forget(self, pod: _Pod, reason: str) -> _Pod:
        """Take `pod` out of the live set (caller holds `_lock`); `_remove` kills it."""
        del self._pods[pod.name]
        self.events.append(
            PodEvent(time.monotonic(), "deleted", pod.group, pod.name, pod.node_id, reason))
        return pod

    def _remove(self, pods: list[_Pod]) -> None:
        # A pod is gone from the operator's view even if killing its processes fails (the
        # error is recorded by the thread), as a deleted Pod object is gone from the API.
        for pod in pods:
            with self._cluster_lock:
                self.cluster.remove_node(pod.node)


# Self-test ---------------------------------------------------------------------------------
# `python -m tests.kuberay_operator`: one scenario on its own Cluster, one JSON line out.

NS, NAME = "ml", "rc"


def self_test_raycluster() -> dict[str, Any]:
    def group(name: str, params: dict[str, str], replicas: int, low: int, high: int):
        return {"groupName": name, "replicas": replicas, "minReplicas": low,
                "maxReplicas": high, "rayStartParams": params,
                "template": {"spec": {"containers": [
                    {"name": "ray-worker", "image": "rayproject/ray:2.60.0"}]}}}

    return {"metadata": {"name": NAME}, "spec": {
        "enableInTreeAutoscaling": True,
        "headGroupSpec": {"rayStartParams": {}},
        "workerGroupSpecs": [
            # replicas below minReplicas: KubeRay still creates minReplicas pods.
            group("cpu", {"num-cpus": "1"}, replicas=0, low=1, high=2),
            group("gpu", {"num-cpus": "2", "num-gpus": "2"}, replicas=0, low=0, high=3),
        ]}}


def _nodes_by_instance(gcs_address: str) -> dict[str, dict[str, Any]]:
    """What Ray reports per cloud instance id: autoscaler v2 cluster status + ray.nodes()."""
    import ray
    from ray.autoscaler.v2.sdk import get_cluster_status

    status = get_cluster_status(gcs_address)
    alive = {n["NodeID"]: n for n in ray.nodes() if n["Alive"]}
    out = {}
    for info in [*status.active_nodes, *status.idle_nodes]:
        node = alive.get(info.node_id or "", {})
        out[info.instance_id] = {
            "node_id": info.node_id,
            "ray_node_type_name": info.ray_node_type_name,
            "labels": {k: v for k, v in (node.get("Labels") or {}).items()
                       if k == NODE_GROUP_LABEL},
            "resources": {k: v for k, v in (node.get("Resources") or {}).items()
                          if k in ("CPU", "GPU")},
        }
    return out


def run_self_test() -> dict[str, Any]:
    import ray
    from kubernetes import client as kube

    from raygang.kuberay import RayClusterClient

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # Cluster starts nodes without auth
    t0 = time.monotonic()
    result: dict[str, Any] = {"timings": {}}

    def mark(what: str) -> None:
        result["timings"][what] = round(time.monotonic() - t0, 2)

    from ray._common.utils import get_default_ray_temp_dir

    address_file = os.path.join(get_default_ray_temp_dir(), "ray_current_cluster")
    previous_address = _read(address_file)
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False})
    _restore(address_file, previous_address)  # leave `ray.init()` elsewhere as it was
    try:
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        gcs = ray.get_runtime_context().gcs_address
        mark("head_up")
        with KubeStandIn() as standin:
            standin.create(NS, self_test_raycluster())
            configuration = kube.Configuration(host=standin.url)
            configuration.retries = 0
            rc = RayClusterClient(kube.CustomObjectsApi(kube.ApiClient(configuration)), NS, NAME)
            with FakeKubeRayOperator(standin, cluster, NS, NAME, poll_s=0.1,
                                     rng=random.Random(7)) as op:
                # 1. minReplicas: the cpu group (replicas 0, minReplicas 1) gets one pod.
                op.wait_for(lambda: len(op.pods("cpu")) == 1, 60, what="cpu pod")
                mark("cpu_min_pod")
                # 2. replicas 0 -> 2: two gpu pods join with their instance ids.
                rc.set_replicas("gpu", 2)
                op.wait_for(lambda: len(op.pods("gpu")) == 2, 60, what="2 gpu pods")
                mark("gpu_two_pods")
                pods = {g: op.pods(g) for g in ("cpu", "gpu")}
                result["pods_after_scale_up"] = pods
                result["node_of"] = {p: op.node_of(p) for g in pods.values() for p in g}
                result["ray_after_scale_up"] = _nodes_by_instance(gcs)
                # 3. delete_workers: exactly that pod goes; replicas 1; the list stays.
                victim, keeper = pods["gpu"]
                rv_before = standin.get(NS, NAME)["metadata"]["resourceVersion"]
                rc.delete_workers("gpu", [victim])
                op.wait_for(lambda: victim not in op.pods("gpu"), 30, what="victim gone")
                mark("victim_gone")
                op.wait_for(lambda: victim not in _nodes_by_instance(gcs), 30,
                            interval=0.2, what="the victim's node gone from Ray")
                mark("victim_gone_in_ray")
                op.wait_passes(5)
                stored = standin.get(NS, NAME)
                gpu_spec = stored["spec"]["workerGroupSpecs"][1]
                result["after_delete"] = {
                    "victim": victim, "keeper": keeper,
                    "gpu_pods": op.pods("gpu"),
                    "replicas": gpu_spec["replicas"],
                    "workersToDelete": gpu_spec.get("scaleStrategy", {}).get("workersToDelete"),
                    "resource_version_moved_by_client_only":
                        int(stored["metadata"]["resourceVersion"]) == int(rv_before) + 1,
                    "ray": _nodes_by_instance(gcs),
                }
                # 4. replicas 1 -> 0 without workersToDelete, autoscaling on: no deletion.
                rc.set_replicas("gpu", 0)
                op.wait_passes(5)
                result["autoscaling_on_lower_replicas_pods"] = op.pods("gpu")
                # 5. autoscaling off: KubeRay deletes a surplus pod of its own choosing.
                standin.mutate(NS, NAME, lambda o: o["spec"].update(enableInTreeAutoscaling=False))
                op.wait_for(lambda: not op.pods("gpu"), 30, what="random deletion")
                mark("random_deleted")
                op.wait_for(lambda: keeper not in _nodes_by_instance(gcs), 30,
                            interval=0.2, what="the random victim's node gone from Ray")
                # 6. a pod deleted behind the operator's back is replaced.
                (killed,) = op.pods("cpu")
                op.kill_pod(killed)
                op.wait_for(lambda: op.pods("cpu") and killed not in op.pods("cpu"), 60,
                            what="a replacement cpu pod")
                mark("killed_pod_replaced")
                op.wait_passes(3)
                result["after_kill"] = {"killed": killed, "cpu_pods": op.pods("cpu")}
            result["events"] = [[e.action, e.group, e.pod, e.reason] for e in op.events]
            result["history"] = [[g, r] for _, g, r in op.history]
            result["errors"] = [getattr(e, "__traceback_text__", repr(e)) for e in op.errors]
            result["final_pods"] = op.pods()
            result["ray_final"] = _nodes_by_instance(gcs)
            result["patches"] = len(standin.patches())
    finally:
        ray.shutdown()
        cluster.shutdown()
        _restore(address_file, previous_address)
        mark("shutdown")
    return result


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _restore(path: str, content: str | None) -> None:
    try:
        if content is None:
            os.remove(path)
        else:
            with open(path, "w") as f:
                f.write(content)
    except OSError:
        pass


if __name__ == "__main__":
    import json

    print(json.dumps(run_self_test()), flush=True)
