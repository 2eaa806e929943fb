"""When the cluster cannot be scaled (the Kubernetes API is down, the RayCluster is gone),
scheduling goes on with the nodes there are, and the error is visible, not swallowed."""

from __future__ import annotations

import json
import time

import raygang
from raygang import demo
from raygang.runtime.ports import free_port
from tests.conftest import SCHEDULER_CONFIG, _scheduler_with
from tests.kube_standin import KubeStandIn


def kubeconfig_for(url: str, path) -> str:
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": url}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    return str(path)


def scaling_status(until, timeout: float = 15):
    deadline = time.monotonic() + timeout
    while True:
        scaling = raygang.cluster().scaling
        if scaling is not None and until(scaling):
            return scaling
        assert time.monotonic() < deadline, scaling
        time.sleep(0.1)


def test_an_unreachable_api_is_reported_and_scheduling_goes_on(ray_cluster, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"  # nobody listens there
    config = SCHEDULER_CONFIG.model_copy(update={"scaling": raygang.ScaleConfig(
        mode="kuberay", raycluster="gone", namespace="ml",
        kubeconfig=kubeconfig_for(dead, tmp_path / "kubeconfig"))})
    try:
        raygang.shutdown()
        raygang.start(config)
        scaling = scaling_status(lambda s: s.last_error)
        assert scaling.last_error.startswith("KubeRayUnavailable"), scaling.last_error
        # Gangs that fit the nodes there are still run.
        task = raygang.gang_task(demo.sleep, name="fits", replicas=2, num_cpus=1)
        assert task.remote(seconds=0.1).wait(timeout=60).state.value == "SUCCEEDED"
    finally:
        _scheduler_with(SCHEDULER_CONFIG)


def test_a_missing_raycluster_is_a_not_found_error(ray_cluster, tmp_path):
    with KubeStandIn() as kube:
        config = SCHEDULER_CONFIG.model_copy(update={"scaling": raygang.ScaleConfig(
            mode="kuberay", raycluster="gone", namespace="ml",
            kubeconfig=kubeconfig_for(kube.url, tmp_path / "kubeconfig"))})
        try:
            raygang.shutdown()
            raygang.start(config)
            scaling = scaling_status(lambda s: s.last_error)
            assert scaling.last_error.startswith("NotFoundError"), scaling.last_error
            assert "gone" in scaling.last_error
        finally:
            _scheduler_with(SCHEDULER_CONFIG)
