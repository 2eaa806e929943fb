"""End-to-end scaling scenarios, each on a Ray cluster of its own (so each runs in a process
of its own: `python -m tests.e2e.scaling_scenarios kuberay|autoscaler`); the test
parses the JSON line it prints and asserts on it, and the scenario asserts as it goes.

- `kuberay`: the loopback Kubernetes API stand-in holds a RayCluster; a test-side operator
  (tests/kuberay_operator.py) adds and removes nodes of a local `Cluster` as its worker
  groups' `replicas` and `workersToDelete` change. Only raygang's patches drive it. Then,
  on the same cluster, a burst of short gangs: replicas must go up, then down, once.
- `autoscaler`: Ray's own autoscaler with its fake multi-node provider
  (tests/fake_autoscaler.py) launches and removes nodes; raygang calls request_resources.

A gang of 2 x {GPU: 2, CPU: 1} does not fit the GPU-less head: it waits "for 2 nodes of
group gpu", the nodes come up, it runs and ends, and the idle nodes go after the idle
timeout. Nothing may leak: no raygang placement group or member actor, and every
resource free again at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

NS, NAME = "ml", "raygang"
GPU_SHAPE = {"num-cpus": "2", "num-gpus": "2"}
IDLE_TIMEOUT_S = 4.0
SCALE_DOWN_DELAY_S = 2.0
AUTOSCALER_HOLD_S = 6.0


def wait_until(predicate: Callable[[], object], timeout: float, what: str, step: float = 0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def raycluster(gpu_max: int = 3) -> dict:
    def group(name: str, params: dict, limits: dict, max_replicas: int) -> dict:
        return {
            "groupName": name, "replicas": 0, "minReplicas": 0, "maxReplicas": max_replicas,
            "rayStartParams": params,
            "template": {"spec": {"containers": [{
                "name": "ray-worker", "image": "rayproject/ray:2.60.0",
                "resources": {"limits": limits, "requests": limits},
            }]}},
        }

    return {"metadata": {"name": NAME}, "spec": {
        "rayVersion": "2.60.0",
        "headGroupSpec": {"rayStartParams": {"num-cpus": "2", "num-gpus": "0"}},
        "workerGroupSpecs": [
            group("cpu", {"num-cpus": "4"}, {"cpu": "4", "memory": "8Gi"}, 2),
            group("gpu", GPU_SHAPE, {"cpu": "2", "memory": "8Gi", "nvidia.com/gpu": "2"},
                  gpu_max),
        ],
    }}


def kubeconfig(url: str, directory: str) -> str:
    path = Path(directory, "kubeconfig")
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "standin",
        "clusters": [{"name": "standin", "cluster": {"server": url}}],
        "users": [{"name": "raygang", "user": {}}],
        "contexts": [{"name": "standin",
                      "context": {"cluster": "standin", "user": "raygang", "namespace": NS}}],
    }))
    return str(path)


def gpu_gang(name: str, seconds: float):
    import raygang
    from raygang import demo

    task = raygang.gang_task(demo.sleep, name=name, replicas=2, num_gpus=2, num_cpus=1,
                             strategy="SPREAD")
    return task.remote(seconds=seconds)


def check_no_leaks(timeout: float = 30) -> None:
    import ray

    from tests.integration import leaks

    deadline = time.monotonic() + timeout
    while True:
        total, free = ray.cluster_resources(), ray.available_resources()
        left = leaks.raygang_placement_groups() or leaks.raygang_member_actors()
        short = {k: (free.get(k, 0), v) for k, v in total.items()
                 if k in ("CPU", "GPU") and free.get(k, 0) != v}
        if not left and not short:
            return
        if time.monotonic() > deadline:
            raise AssertionError(f"leaked: {left or short}")
        time.sleep(0.2)


def scaler_ready(timeout: float = 60) -> None:
    """Until the scheduler's scaler has read the node groups once: its first step after a
    start builds its clients (the Kubernetes one, the GCS's autoscaler state), which takes
    seconds on a loaded machine; what is timed is a submission to a running scaler."""
    import raygang

    wait_until(lambda: (s := raygang.cluster().scaling) is not None and s.groups, timeout,
               "the scaler's first read of the node groups", step=0.1)


def run_gang_through_scaling(group: str, seconds: float, requested: Callable[[], bool],
                             nodes_of_group: Callable[[], int]) -> dict:
    """Submit the GPU gang; time the request and the start; wait until it ends and its
    nodes are gone. Returns the timings and what the gang's status said."""
    scaler_ready()
    t0 = time.monotonic()
    ref = gpu_gang("needs-nodes", seconds)
    # From the submission until it leaves PENDING, both at once: when the request is out,
    # and every reason the gang gives while it waits (on a loaded machine the nodes may be
    # up, and the gang past PENDING, before a poll started after the request reads it).
    t_request, reasons = None, []
    while (status := ref.status()).state.value == "PENDING":
        if status.reason and status.reason not in reasons:
            reasons.append(status.reason)
        if t_request is None and requested():
            t_request = time.monotonic() - t0
        assert time.monotonic() - t0 < 90, f"still PENDING after 90 s: {reasons}"
        time.sleep(0.05)
    if t_request is None:  # it ran before a poll saw the request: an upper bound
        assert requested(), f"{ref.gang_id} runs, yet no scale request was seen"
        t_request = time.monotonic() - t0
    # 2 nodes asked for; by the time the reason is read on a loaded machine, the first may
    # be up already (then it waits for the other one).
    waiting = rf"waiting for (2 nodes|1 node) of group {group} \(requested at "
    told = [r for r in reasons if re.search(waiting, r)]
    assert told, f"while pending, no reason named the nodes it waited for: {reasons}"
    reason = told[0]
    ref.ready(timeout=120)
    t_running = time.monotonic() - t0
    status = ref.wait(timeout=60)
    assert status.state.value == "SUCCEEDED", status
    events = [e.reason for e in status.events]
    assert f"requested 2 nodes of group {group}" in events, events
    t_done = time.monotonic()
    wait_until(lambda: nodes_of_group() == 0, 120, f"the idle {group} nodes to go", step=0.2)
    return {"request_s": t_request, "running_s": t_running,
            "released_after_s": time.monotonic() - t_done, "reason": reason,
            "nodes": sorted(set(m.node_id for m in status.members))}


def alive_in_group(group: str) -> int:
    import ray

    return sum(1 for n in ray.nodes()
               if n["Alive"] and (n.get("Labels") or {}).get("ray.io/node-group") == group)


def kuberay() -> dict:
    import ray
    from ray.cluster_utils import Cluster

    import raygang
    from tests.kube_standin import KubeStandIn
    from tests.kuberay_operator import FakeKubeRayOperator

    out: dict = {"mode": "kuberay"}
    with tempfile.TemporaryDirectory() as tmp, KubeStandIn() as kube:
        kube.create(NS, raycluster())
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "num_gpus": 0, "include_dashboard": False})
        operator = FakeKubeRayOperator(kube, cluster, NS, NAME)
        try:
            ray.init(address=cluster.address)
            operator.start()
            raygang.start(raygang.SchedulerConfig.model_validate({"scaling": {
                "mode": "kuberay", "raycluster": NAME, "namespace": NS,
                "kubeconfig": kubeconfig(kube.url, tmp), "idle_timeout_s": IDLE_TIMEOUT_S,
                "scale_down_delay_s": SCALE_DOWN_DELAY_S}}))

            def replicas() -> int:
                spec = kube.get(NS, NAME)["spec"]["workerGroupSpecs"][1]
                return spec["replicas"]

            out.update(run_gang_through_scaling(
                "gpu", 2.0, lambda: replicas() == 2, lambda: len(operator.pods("gpu"))))
            cluster_status = raygang.cluster()
            out["scaling"] = cluster_status.scaling.model_dump() if cluster_status.scaling else None
            out["replica_history"] = [(g, r) for _, g, r in operator.history]
            out["patches"] = len(kube.patches())
            assert replicas() == 0
            # Then, on the same cluster (one start fewer), a burst of short gangs.
            out["burst"] = burst(replicas)
            assert replicas() == 0
            assert not operator.errors, operator.errors
            check_no_leaks()
        finally:
            raygang.shutdown()
            operator.stop()
            ray.shutdown()
            cluster.shutdown()
    return out


def burst(replicas: Callable[[], int]) -> dict:
    """Short gangs arriving faster than they end: replicas must rise to what they need,
    then fall once they are all done, never rise-fall-rise while they keep coming."""
    import raygang
    from raygang import demo

    seen = [replicas()]
    refs = []
    one = raygang.gang_task(demo.sleep, name="short", replicas=1, num_gpus=2, num_cpus=1)
    for i in range(6):
        refs.append(one.remote(seconds=1.0))
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            if replicas() != seen[-1]:
                seen.append(replicas())
            time.sleep(0.05)
    for ref in refs:
        assert ref.wait(timeout=120).state.value == "SUCCEEDED"
        if replicas() != seen[-1]:
            seen.append(replicas())
    deadline = time.monotonic() + 60
    while replicas() > 0 and time.monotonic() < deadline:
        if replicas() != seen[-1]:
            seen.append(replicas())
        time.sleep(0.05)
    seen.append(replicas())
    return {"replicas_seen": seen}


def autoscaler() -> dict:
    """raygang asks Ray's autoscaler (v1, fake provider) for nodes and clears the request;
    and the fake cluster itself behaves: v1's monitor runs, its nodes are labelled by type,
    and its shutdown leaves no process of it while sparing one that only looks like Ray's."""
    import ray

    import raygang
    from tests.fake_autoscaler import FakeAutoscalingCluster, cmdline, psutil

    out: dict = {"mode": "autoscaler"}
    # Not of this cluster: must survive its shutdown although its command line looks Ray's.
    decoy = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)",
         "/x/ray/core/src/ray/raylet/raylet", "--session_dir=/tmp/ray/session_decoy"],
        start_new_session=True)
    types = {"gpu": {"resources": {"CPU": 2, "GPU": 2}, "min_workers": 0, "max_workers": 3}}
    cluster = FakeAutoscalingCluster(head_resources={"CPU": 2}, worker_node_types=types,
                                     idle_timeout_minutes=IDLE_TIMEOUT_S / 60)
    try:
        with cluster:
            out["monitor"] = " ".join(cmdline(psutil.Process(cluster.monitor_pid)))[:200]
            ray.init(address=cluster.address)
            try:
                raygang.start(raygang.SchedulerConfig.model_validate({"scaling": {
                    "mode": "autoscaler", "idle_timeout_s": IDLE_TIMEOUT_S,
                    # The request is held this long after the gang's admission: longer
                    # than the kuberay scenario's, since Ray's autoscaler (update every
                    # 5 s) reads idleness late, and its idle timeout here is 4 s.
                    "scale_down_delay_s": AUTOSCALER_HOLD_S,
                    "node_types": [{"name": "gpu", "resources": {"CPU": 2, "GPU": 2},
                                    "max_nodes": 3}]}}))
                # The new nodes are found by their label (alive_in_group): the fake
                # provider's nodes carry their type's.
                out.update(run_gang_through_scaling(
                    "gpu", 2.0, lambda: bool(resource_request()),
                    lambda: alive_in_group("gpu")))
                assert resource_request() == [], "the request is cleared once nothing waits"
                check_no_leaks()
            finally:
                raygang.shutdown()
                ray.shutdown()
            out["processes_before_shutdown"] = len(cluster.processes())
        out["left_after_shutdown"] = [" ".join(cmdline(p))[:120] for p in cluster.processes()]
        out["dir_left"] = os.path.exists(cluster.temp_dir or "")
        out["decoy_alive"] = decoy.poll() is None
    finally:
        decoy.kill()
        decoy.wait()
    return out


def resource_request() -> list[dict] | None:
    """What request_resources last asked Ray's autoscaler for (None: never asked)."""
    from ray.autoscaler._private.constants import AUTOSCALER_RESOURCE_REQUEST_CHANNEL
    from ray.experimental.internal_kv import _internal_kv_get

    raw = _internal_kv_get(AUTOSCALER_RESOURCE_REQUEST_CHANNEL)
    return None if raw is None else json.loads(raw)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("scenario", choices=["kuberay", "autoscaler"])
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    result = {"kuberay": kuberay, "autoscaler": autoscaler}[args.scenario]()
    print("RESULT " + json.dumps(result, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
