"""RayClusterClient through the official `kubernetes` client against a loopback API stand-in."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client as kube

from raygang.core.resources import Resources
from raygang.kuberay import (
    ConflictError,
    ForbiddenError,
    InvalidError,
    KubeRayError,
    KubeRayUnavailable,
    NotFoundError,
    RayClusterClient,
    parse_quantity,
)
from raygang.kuberay.groups import parse_custom_resources
from raygang.runtime.ports import free_port
from tests.kube_standin import JSON_PATCH, KubeStandIn

NS, NAME = "ml", "raycluster-a"


def worker_group(name, *, replicas=2, min_replicas=0, max_replicas=8, params=None,
                 limits=None, requests=None, **extra):
    resources = {k: v for k, v in (("limits", limits), ("requests", requests)) if v}
    return {
        "groupName": name, "replicas": replicas, "minReplicas": min_replicas,
        "maxReplicas": max_replicas, "rayStartParams": params or {},
        "template": {"spec": {"containers": [
            {"name": "ray-worker", "image": "rayproject/ray:2.60.0", "resources": resources},
            {"name": "sidecar", "resources": {"limits": {"cpu": "16"}}},
        ]}},
        **extra,
    }


def raycluster(*groups):
    return {"metadata": {"name": NAME},
            "spec": {"headGroupSpec": {"rayStartParams": {}}, "workerGroupSpecs": list(groups)}}


GPU_GROUP = worker_group("gpu", limits={"cpu": "8", "memory": "64Gi", "nvidia.com/gpu": "4"})
CPU_GROUP = worker_group("cpu", replicas=1, limits={"cpu": "500m", "memory": "16Gi"})
TPU_GROUP = worker_group(
    "tpu", replicas=0, min_replicas=0, max_replicas=4, numOfHosts=2,
    params={"num-cpus": "2", "memory": "1000000000", "resources": '"{\\"TPU\\": 4}"'},
    limits={"cpu": "24", "memory": "32Gi"},
)


@pytest.fixture
def kube_api():
    with KubeStandIn() as standin:
        standin.create(NS, raycluster(GPU_GROUP, CPU_GROUP, TPU_GROUP))
        yield standin


def make_client(url, **kwargs):
    configuration = kube.Configuration(host=url)
    configuration.retries = 0  # fail fast; the client's own retries are what we test
    api = kube.CustomObjectsApi(kube.ApiClient(configuration))
    return RayClusterClient(api, NS, NAME, request_timeout=2.0, **kwargs)


@pytest.fixture
def rc(kube_api):
    return make_client(kube_api.url)


def groups_by_name(client):
    return {g.name: g for g in client.worker_groups()}


# Quantities -------------------------------------------------------------------------------
@pytest.mark.parametrize("text,value", [
    ("4", 4.0), ("500m", 0.5), ("16Gi", 16 * 2**30), ("1G", 1e9), ("1.5", 1.5),
    ("1e3", 1000.0), ("2k", 2000.0), ("128Mi", 128 * 2**20), (3, 3.0),
])
def test_parse_quantity(text, value):
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "abc", "-1", "4 cpus", "1.2.3"])
def test_parse_quantity_rejects(text):
    with pytest.raises(ValueError):
        parse_quantity(text)


@pytest.mark.parametrize("text", ['"{\\"TPU\\": 4}"', '{"TPU": 4}', '\'{"TPU": 4}\''])
def test_custom_resources_in_the_forms_kuberay_documents(text):
    assert parse_custom_resources(text) == {"TPU": 4.0}


# Reads --------------------------------------------------------------------------------------
def test_reads_worker_groups_with_node_shapes(rc, kube_api):
    groups = groups_by_name(rc)
    rv = kube_api.get(NS, NAME)["metadata"]["resourceVersion"]
    gpu, cpu, tpu = groups["gpu"], groups["cpu"], groups["tpu"]
    assert gpu.resources == Resources(CPU=8, GPU=4, memory=64 * 2**30)
    assert cpu.resources == Resources(CPU=0.5, memory=16 * 2**30)
    # rayStartParams win over limits; the sidecar container is not the Ray node.
    assert tpu.resources == Resources(CPU=2, memory=1e9, TPU=4)
    assert (tpu.num_of_hosts, tpu.min_replicas, tpu.max_replicas) == (2, 0, 4)
    assert (gpu.replicas, gpu.num_of_hosts, gpu.workers_to_delete) == (2, 1, ())
    assert {g.resource_version for g in groups.values()} == {rv}


def test_crd_defaults_and_requests_fallback(kube_api, rc):
    bare = {"groupName": "bare", "minReplicas": 0, "maxReplicas": 3,
            "template": {"spec": {"containers": [
                {"name": "w", "resources": {"requests": {"cpu": "2", "memory": "4Gi"}}}]}}}
    kube_api.mutate(NS, NAME, lambda o: o["spec"]["workerGroupSpecs"].append(bare))
    group = groups_by_name(rc)["bare"]
    assert (group.replicas, group.num_of_hosts) == (0, 1)
    assert group.resources == Resources(CPU=2, memory=4 * 2**30)


# Writes -------------------------------------------------------------------------------------
def test_set_replicas_sends_one_guarded_json_patch(rc, kube_api):
    rv = kube_api.get(NS, NAME)["metadata"]["resourceVersion"]
    updated = rc.set_replicas("cpu", 3)
    (patch,) = kube_api.patches()
    assert patch.content_type == JSON_PATCH
    assert patch.path == f"/apis/ray.io/v1/namespaces/{NS}/rayclusters/{NAME}"
    assert patch.body == [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "test", "path": "/spec/workerGroupSpecs/1/replicas", "value": 1},
        {"op": "replace", "path": "/spec/workerGroupSpecs/1/replicas", "value": 3},
    ]
    stored = kube_api.get(NS, NAME)
    assert stored["spec"]["workerGroupSpecs"][1]["replicas"] == 3
    assert updated.replicas == 3
    assert updated.resource_version == stored["metadata"]["resourceVersion"] != rv


def test_set_replicas_to_the_current_value_writes_nothing(rc, kube_api):
    assert rc.set_replicas("gpu", 2).replicas == 2
    assert kube_api.patches() == []


@pytest.mark.parametrize("replicas", [-1, 5])
def test_set_replicas_outside_bounds_is_refused(rc, kube_api, replicas):
    with pytest.raises(ValueError, match=r"'tpu'.*minReplicas=0, maxReplicas=4"):
        rc.set_replicas("tpu", replicas)
    assert kube_api.patches() == []


def test_unknown_group_is_not_found(rc):
    with pytest.raises(NotFoundError, match="no worker group 'nope'"):
        rc.set_replicas("nope", 1)


def test_concurrent_writer_conflict_then_retry_keeps_their_change(rc, kube_api):
    def other_writer():
        # Reorders the groups and raises another group's bounds: a stale index would be wrong.
        def edit(obj):
            specs = obj["spec"]["workerGroupSpecs"]
            specs.reverse()
            next(s for s in specs if s["groupName"] == "gpu")["maxReplicas"] = 16
        kube_api.mutate(NS, NAME, edit)

    kube_api.before_next_patch(other_writer)
    updated = rc.set_replicas("cpu", 4)
    first, second = kube_api.patches()
    assert first.body[0]["value"] != second.body[0]["value"]  # re-read the resourceVersion
    assert second.body[-1] == {"op": "replace", "path": "/spec/workerGroupSpecs/1/replicas",
                               "value": 4}
    specs = {s["groupName"]: s for s in kube_api.get(NS, NAME)["spec"]["workerGroupSpecs"]}
    assert specs["cpu"]["replicas"] == 4 == updated.replicas
    assert specs["gpu"]["maxReplicas"] == 16
    assert [s["groupName"] for s in kube_api.get(NS, NAME)["spec"]["workerGroupSpecs"]] == \
        ["tpu", "cpu", "gpu"]


def test_persistent_conflict_raises_after_max_retries(kube_api):
    rc = make_client(kube_api.url, max_retries=2)
    for _ in range(3):
        kube_api.before_next_patch(
            lambda: kube_api.mutate(NS, NAME, lambda o: o["metadata"].setdefault("labels", {})))
    with pytest.raises(ConflictError, match="after 3 conflicting writes") as info:
        rc.set_replicas("cpu", 4)
    assert info.value.status == 422 and info.value.reason == "Invalid"
    assert "testing value /metadata/resourceVersion failed" in info.value.message
    assert len(kube_api.patches()) == 3
    assert kube_api.get(NS, NAME)["spec"]["workerGroupSpecs"][1]["replicas"] == 1


def test_409_conflict_is_retried(rc, kube_api):
    kube_api.fail_next(409, "Conflict", "the object has been modified", method="PATCH")
    assert rc.set_replicas("cpu", 2).replicas == 2
    assert len(kube_api.patches()) == 2


def test_delete_workers_appends_and_lowers_replicas_in_one_patch(rc, kube_api):
    rc.delete_workers("gpu", ["gpu-worker-a"])
    updated = rc.delete_workers("gpu", ["gpu-worker-b", "gpu-worker-a"])  # a: already listed
    assert len(kube_api.patches()) == 2
    first, second = (p.body for p in kube_api.patches())
    base = "/spec/workerGroupSpecs/0"
    assert first[1:] == [
        {"op": "test", "path": f"{base}/replicas", "value": 2},
        {"op": "replace", "path": f"{base}/replicas", "value": 1},
        {"op": "add", "path": f"{base}/scaleStrategy", "value": {"workersToDelete": ["gpu-worker-a"]}},
    ]
    assert second[-2:] == [
        {"op": "test", "path": f"{base}/scaleStrategy/workersToDelete", "value": ["gpu-worker-a"]},
        {"op": "replace", "path": f"{base}/scaleStrategy/workersToDelete",
         "value": ["gpu-worker-a", "gpu-worker-b"]},
    ]
    stored = kube_api.get(NS, NAME)["spec"]["workerGroupSpecs"][0]
    assert stored["replicas"] == 0 == updated.replicas
    assert stored["scaleStrategy"]["workersToDelete"] == ["gpu-worker-a", "gpu-worker-b"]
    assert updated.workers_to_delete == ("gpu-worker-a", "gpu-worker-b")


def test_delete_workers_below_min_replicas_is_refused(kube_api, rc):
    kube_api.mutate(NS, NAME, lambda o: o["spec"]["workerGroupSpecs"][0].update(minReplicas=2))
    with pytest.raises(ValueError, match="'gpu'"):
        rc.delete_workers("gpu", ["gpu-worker-a"])
    assert kube_api.patches() == []


# Errors -------------------------------------------------------------------------------------
def test_missing_cluster_is_not_found_with_the_server_message(kube_api):
    rc = RayClusterClient(make_client(kube_api.url).api, NS, "gone")
    with pytest.raises(NotFoundError) as info:
        rc.worker_groups()
    assert (info.value.status, info.value.reason) == (404, "NotFound")
    assert info.value.message == 'rayclusters.ray.io "gone" not found'


def test_forbidden(rc, kube_api):
    message = ('rayclusters.ray.io "raycluster-a" is forbidden: User "system:serviceaccount:'
               'ml:raygang" cannot patch resource "rayclusters" in API group "ray.io"')
    kube_api.fail_next(403, "Forbidden", message, method="PATCH")
    with pytest.raises(ForbiddenError) as info:
        rc.set_replicas("cpu", 2)
    assert info.value.message == message and info.value.status == 403


def test_server_error_is_a_kuberay_error_not_none(rc, kube_api):
    kube_api.fail_next(500, "InternalError", "etcdserver: request timed out")
    with pytest.raises(KubeRayError) as info:
        rc.worker_groups()
    assert type(info.value) is KubeRayError and info.value.status == 500
    assert "etcdserver" in info.value.message


def test_invalid_patch_not_from_a_test_op_is_invalid(rc, kube_api):
    # 422 from schema validation (no failed `test` in it) is not retried: it would fail again.
    kube_api.fail_next(422, "Invalid", 'RayCluster.ray.io "raycluster-a" is invalid: '
                       "spec.workerGroupSpecs[1].replicas: Invalid value", method="PATCH")
    with pytest.raises(InvalidError, match="Invalid value"):
        rc.set_replicas("cpu", 2)
    assert len(kube_api.patches()) == 1


def test_unreachable_server_is_unavailable_quickly():
    rc = make_client(f"http://127.0.0.1:{free_port()}")  # nobody listens there
    started = time.monotonic()
    with pytest.raises(KubeRayUnavailable):
        rc.worker_groups()
    assert time.monotonic() - started < 2


def test_standin_answers_a_failed_test_op_as_kube_apiserver_does(rc, kube_api):
    api = rc.api
    with pytest.raises(kube.exceptions.ApiException) as info:
        api.patch_namespaced_custom_object(
            "ray.io", "v1", NS, "rayclusters", NAME,
            [{"op": "test", "path": "/metadata/resourceVersion", "value": "1"}],
            _content_type=JSON_PATCH)
    assert info.value.status == 422
    body = json.loads(info.value.body)
    assert body["reason"] == "Invalid"
    assert body["message"] == "the server rejected our request due to an error in our request"
    assert body["details"]["causes"][0]["message"] == \
        "testing value /metadata/resourceVersion failed: test failed"
