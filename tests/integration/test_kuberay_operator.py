"""The test-side KubeRay operator stand-in (tests/kuberay_operator.py) on its own.

RayClusterClient writes the RayCluster in a KubeStandIn; FakeKubeRayOperator turns it into
Ray nodes of a `ray.cluster_utils.Cluster`. That Cluster and its driver live in a
subprocess (`python -m tests.kuberay_operator`), apart from the session's shared cluster and
this process's Ray driver; the scenario prints one JSON line, asserted on here.
No raygang scheduler is involved.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kuberay_operator import desired_pods
from tests.scripts import script_env

pytestmark = pytest.mark.own_cluster  # see tests/conftest.py

ROOT = Path(__file__).resolve().parents[2]
NAME = "rc"


@pytest.fixture(scope="module")
def scenario():
    env = {**script_env(), "RAY_AUTH_MODE": "disabled"}
    env.pop("ENABLE_RANDOM_POD_DELETE", None)
    proc = subprocess.run([sys.executable, "-m", "tests.kuberay_operator"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=150)
    assert proc.returncode == 0, proc.stderr[-4000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    assert lines, (proc.stdout[-2000:], proc.stderr[-2000:])
    return json.loads(lines[-1])


def test_operator_thread_raised_nothing(scenario):
    assert scenario["errors"] == []


def test_min_replicas_gives_a_pod_though_replicas_is_zero(scenario):
    (cpu_pod,) = scenario["pods_after_scale_up"]["cpu"]
    assert cpu_pod.startswith(f"{NAME}-cpu-worker-")
    assert scenario["ray_after_scale_up"][cpu_pod]["resources"] == {"CPU": 1.0}


def test_scale_up_joins_labelled_nodes_with_their_instance_ids(scenario):
    gpu_pods = scenario["pods_after_scale_up"]["gpu"]
    assert len(gpu_pods) == 2
    ray_view = scenario["ray_after_scale_up"]
    for pod in gpu_pods:
        suffix = pod.removeprefix(f"{NAME}-gpu-worker-")
        assert len(suffix) == 5 and suffix.isalpha() and suffix.islower()
        node = ray_view[pod]  # autoscaler v2 status: instance_id is the pod name
        assert node["node_id"] == scenario["node_of"][pod]
        assert node["ray_node_type_name"] == "gpu"
        assert node["labels"] == {"ray.io/node-group": "gpu"}
        assert node["resources"] == {"CPU": 2.0, "GPU": 2.0}
    # head + cpu pod + two gpu pods, and nothing else
    assert set(ray_view) - set(gpu_pods) - set(scenario["pods_after_scale_up"]["cpu"]) \
        == {""}


def test_delete_workers_removes_exactly_that_pod(scenario):
    after = scenario["after_delete"]
    assert after["gpu_pods"] == [after["keeper"]]
    assert after["replicas"] == 1
    assert after["victim"] not in after["ray"]
    assert after["keeper"] in after["ray"]
    assert after["ray"][after["keeper"]]["node_id"] == scenario["node_of"][after["keeper"]]
    # KubeRay never clears workersToDelete (nor writes the spec at all): the one write
    # after the read was the client's.
    assert after["workersToDelete"] == [after["victim"]]
    assert after["resource_version_moved_by_client_only"]
    # ... and deleting a listed pod creates no replacement.
    created = [e for e in scenario["events"] if e[0] == "created" and e[1] == "gpu"]
    assert len(created) == 2


def test_lower_replicas_deletes_randomly_only_without_autoscaling(scenario):
    after = scenario["after_delete"]
    assert scenario["autoscaling_on_lower_replicas_pods"] == [after["keeper"]]
    deleted = [(e[2], e[3]) for e in scenario["events"] if e[0] == "deleted" and e[1] == "gpu"]
    assert deleted == [(after["victim"], "workersToDelete"), (after["keeper"], "random")]
    assert after["keeper"] not in scenario["ray_final"]


def test_a_killed_pod_is_replaced(scenario):
    killed = scenario["after_kill"]["killed"]
    assert killed == scenario["pods_after_scale_up"]["cpu"][0]
    (replacement,) = scenario["after_kill"]["cpu_pods"]
    assert replacement != killed
    assert scenario["final_pods"] == [replacement]
    assert ["deleted", "cpu", killed, "killed"] in scenario["events"]
    assert ["created", "cpu", replacement, "scale-up"] in scenario["events"]
    assert set(scenario["ray_final"]) == {"", replacement}


def test_history_has_each_replicas_change_once(scenario):
    assert scenario["history"] == [["cpu", 0], ["gpu", 0], ["gpu", 2], ["gpu", 1], ["gpu", 0]]


@pytest.mark.parametrize(("spec", "pods"), [
    ({"replicas": 2, "minReplicas": 0, "maxReplicas": 3}, 2),
    ({"replicas": 0, "minReplicas": 1, "maxReplicas": 3}, 1),
    ({"replicas": 5, "minReplicas": 0, "maxReplicas": 3}, 3),
    ({"minReplicas": 2, "maxReplicas": 3}, 2),
    ({"replicas": 1, "minReplicas": 4, "maxReplicas": 3}, 3),
    ({"replicas": 2, "minReplicas": 0, "maxReplicas": 3, "numOfHosts": 2}, 4),
    ({"replicas": 2, "minReplicas": 0, "maxReplicas": 3, "suspend": True}, 0),
])
def test_desired_pods_follows_kuberay(spec, pods):
    assert desired_pods(spec) == pods
