"""The two ways a scale plan reaches the cluster, without Ray: KubeRay patches through the
real `kubernetes` client against the loopback API stand-in, and the bundles the autoscaler
mode asks Ray's autoscaler for. The end-to-end tiers run both against real Ray."""

from __future__ import annotations

import asyncio
import threading

import pytest

from raygang.control.config import ScaleConfig, SchedulerConfig
from raygang.control.records import GangRecord
from raygang.core import ClusterSnapshot, Resources
from raygang.core.config import NodeType
from raygang.core.scale import NodeGroup, ScalePlan
from raygang.runtime.scheduler.scalers import AutoscalerScaler, KubeRayScaler, RequestOut
from raygang.runtime.scheduler import scaling as scaling_module
from raygang.runtime.scheduler.scaling import Request, ScaleDriver
from tests.kube_standin import KubeStandIn
from tests.unit.builders import gang, spec
from tests.unit.test_kuberay_client import NAME, NS, make_client, raycluster, worker_group

GPU = worker_group("gpu", replicas=1, min_replicas=0, max_replicas=3,
                   params={"num-cpus": "4", "num-gpus": "4"})
CPU = worker_group("cpu", replicas=2, min_replicas=1, max_replicas=5, params={"num-cpus": "8"})
TPU = worker_group("tpu", replicas=1, min_replicas=0, max_replicas=2, numOfHosts=2,
                   params={"num-cpus": "2", "resources": '"{\\"TPU\\": 4}"'})


@pytest.fixture
def kube():
    with KubeStandIn() as standin:
        standin.create(NS, raycluster(GPU, CPU, TPU))
        yield standin


def stored(kube, group):
    spec_ = next(g for g in kube.get(NS, NAME)["spec"]["workerGroupSpecs"]
                 if g["groupName"] == group)
    return spec_["replicas"], (spec_.get("scaleStrategy") or {}).get("workersToDelete", [])


def test_kuberay_groups_count_hosts_and_bounds(kube):
    groups = {g.name: g for g in KubeRayScaler(make_client(kube.url), {"cpu": 3.0}).groups({})}
    assert groups["gpu"] == NodeGroup("gpu", Resources(CPU=4, GPU=4), 0, 3, 1, None)
    assert groups["cpu"].cost == 3.0 and groups["cpu"].min_nodes == 1
    # A multi-host replica is numOfHosts Ray nodes.
    assert (groups["tpu"].nodes, groups["tpu"].max_nodes) == (2, 4)
    assert groups["tpu"].shape == Resources(CPU=2, TPU=4)


def test_kuberay_scales_up_by_replicas_and_down_by_named_pods(kube):
    scaler = KubeRayScaler(make_client(kube.url), {})
    groups = scaler.groups({})
    plan = ScalePlan(desired={"gpu": 3, "cpu": 1, "tpu": 3}, release=("node-x",))
    done = scaler.apply(plan, groups, {"cpu": ["rc-cpu-worker-abcde"]}, waiting=True)
    assert stored(kube, "gpu") == (3, [])
    # Down only through named pods: replicas and workersToDelete in one guarded patch.
    assert stored(kube, "cpu") == (1, ["rc-cpu-worker-abcde"])
    assert stored(kube, "tpu") == (2, [])  # 3 nodes = 2 replicas of 2 hosts
    assert done == ["cpu: workersToDelete += rc-cpu-worker-abcde (replicas 1)",
                    "gpu: replicas 1 -> 3", "tpu: replicas 1 -> 2"]
    # A desired count below replicas never lowers them without a named pod.
    assert scaler.apply(ScalePlan(desired={"gpu": 0}), scaler.groups({}), {}, True) == []
    assert stored(kube, "gpu") == (3, [])


def test_kuberay_scale_up_survives_a_concurrent_writer(kube):
    scaler = KubeRayScaler(make_client(kube.url), {})
    groups = scaler.groups({})

    def operator_edits():  # another writer changes the cluster between read and patch
        kube.mutate(NS, NAME, lambda o: o["metadata"].setdefault("labels", {}).update(x="y"))

    kube.before_next_patch(operator_edits)
    scaler.apply(ScalePlan(desired={"gpu": 2}), groups, {}, waiting=True)
    assert stored(kube, "gpu") == (2, [])
    assert kube.get(NS, NAME)["metadata"]["labels"] == {"x": "y"}


def test_autoscaler_requests_the_whole_desired_cluster_once_and_clears():
    sent = []
    types = [NodeGroup("gpu4", Resources(CPU=4, GPU=4, memory=2**30), nodes=1),
             NodeGroup("cpu8", Resources(CPU=8))]
    scaler = AutoscalerScaler(lambda up: types, request=sent.append)
    plan = ScalePlan(desired={"gpu4": 2, "cpu8": 1})
    assert scaler.apply(plan, types, {}, waiting=True) == ["request_resources: 2×gpu4, 1×cpu8"]
    # Node-shaped bundles, memory left out (a real node's never equals the config's).
    assert sent == [[{"CPU": 4, "GPU": 4}, {"CPU": 4, "GPU": 4}, {"CPU": 8}]]
    assert scaler.apply(plan, types, {}, waiting=True) == []  # the same request: not resent
    assert scaler.apply(plan, types, {}, waiting=False) == ["request_resources cleared"]
    assert sent[-1] == [] and len(sent) == 2


def test_autoscaler_holds_the_request_for_the_scale_down_delay_after_the_last_wait():
    # The step the nodes are up, the gang is admitted and nothing waits; Ray's autoscaler
    # reads idleness late, so a request cleared then can lose the new nodes under the gang.
    sent, now = [], [0.0]
    types = [NodeGroup("gpu4", Resources(CPU=4, GPU=4))]
    scaler = AutoscalerScaler(lambda up: types, request=sent.append, clock=lambda: now[0],
                              hold_s=5.0)
    plan = ScalePlan(desired={"gpu4": 2})
    assert scaler.apply(plan, types, {}, waiting=True) == ["request_resources: 2×gpu4"]
    now[0] = 3.0  # admitted: nothing waits, the request stays as it was (not even resent)
    assert scaler.apply(ScalePlan(desired={"gpu4": 2}), types, {}, waiting=False) == []
    now[0] = 4.0  # a gang waits again: its request replaces the held one, the hold restarts
    assert scaler.apply(ScalePlan(desired={"gpu4": 3}), types, {}, waiting=True) == [
        "request_resources: 3×gpu4"]
    now[0] = 8.9
    assert scaler.apply(plan, types, {}, waiting=False) == []
    now[0] = 9.0
    assert scaler.apply(plan, types, {}, waiting=False) == ["request_resources cleared"]
    assert sent == [[{"CPU": 4, "GPU": 4}] * 2, [{"CPU": 4, "GPU": 4}] * 3, []]


def test_a_request_out_whose_coordinator_was_not_told_is_news_once_and_told_again():
    # The coordinator's first call starts its actor (a process importing Ray Data): on a
    # loaded machine it outlasts the call's timeout, after the request went to Ray's
    # autoscaler directly. The step did ask for the nodes, and says so; the next step tells
    # the coordinator, without a second line in the action log.
    sent = []
    types = [NodeGroup("gpu4", Resources(CPU=4, GPU=4))]

    def coordinator_late(bundles):
        sent.append(bundles)
        if len(sent) == 1:
            raise RequestOut("the autoscaling coordinator was not reached: GetTimeoutError()")

    scaler = AutoscalerScaler(lambda up: types, request=coordinator_late)
    plan = ScalePlan(desired={"gpu4": 2})
    assert scaler.apply(plan, types, {}, waiting=True) == ["request_resources: 2×gpu4"]
    assert scaler.apply(plan, types, {}, waiting=True) == []  # told again, not news
    assert scaler.apply(plan, types, {}, waiting=True) == []  # told: not sent again
    assert sent == [[{"CPU": 4, "GPU": 4}] * 2] * 2


def test_scale_config_modes_are_checked():
    with pytest.raises(ValueError, match="node_types: autoscaler mode needs"):
        ScaleConfig(mode="autoscaler")
    with pytest.raises(ValueError, match="only autoscaler mode takes node types"):
        ScaleConfig(mode="kuberay", raycluster="rc",
                    node_types=[NodeType(name="gpu", resources={"GPU": 4})])
    with pytest.raises(ValueError, match="min_nodes: 3 is above max_nodes 1"):
        NodeType(name="gpu", resources={"GPU": 4}, min_nodes=3, max_nodes=1)
    config = SchedulerConfig.model_validate({"scaling": {
        "mode": "autoscaler", "idle_timeout_s": 30,
        "node_types": [{"name": "gpu4", "resources": {"CPU": 4, "GPU": 4}, "max_nodes": 2}]}})
    assert config.scaling.node_types[0].max_nodes == 2


def test_pending_gang_says_which_nodes_it_waits_for():
    driver = ScaleDriver(ScaleConfig(mode="kuberay", raycluster="rc"))
    driver.last_plan = ScalePlan(waiting_for={"a": ("gpu", 2), "b": ("gpu", 0)},
                                 at_max={"c": "group gpu is at its maximum of 3 nodes"},
                                 infeasible={"d": "needs GPU 16 on one node"})
    driver.requested = {"a": Request("gpu", 2, 1_790_000_000.0)}
    assert driver.note("a") == "waiting for 2 nodes of group gpu (requested at 2026-09-21T14:13:20Z)"
    assert driver.note("b") == "waiting for nodes of group gpu already requested"
    assert driver.note("c") == "no node can be added: group gpu is at its maximum of 3 nodes"
    assert driver.note("d").startswith("no worker group can ever host it: needs GPU 16")
    assert driver.note("e") is None
    # Asked for, and a later plan places it on the nodes coming up without naming their
    # group (one is up before its label is read): it still says what it waits for.
    driver.requested["f"] = Request("gpu", 1, 1_790_000_000.0)
    assert driver.note("f") == "waiting for 1 node of group gpu (requested at 2026-09-21T14:13:20Z)"

    record = GangRecord("a", spec("a", "4xGPU=1"), {}, 100, 0, 0.0)
    record.set_waiting(code=None, message="needs 4×{GPU: 1}", position=1)
    record.set_scale_note(driver.note("a"))
    assert record.reason.startswith("waiting for 2 nodes of group gpu (requested at ")
    assert record.reason.endswith("; needs 4×{GPU: 1}")


def test_kuberay_takes_deleted_pods_off_workers_to_delete(kube):
    # KubeRay deletes listed pods but never clears the list (Ray's autoscaler does): in
    # kuberay mode raygang is the one writer, so it must, or the list grows forever.
    scaler = KubeRayScaler(make_client(kube.url), {})
    groups = scaler.groups({})
    scaler.apply(ScalePlan(desired={"cpu": 1}), groups, {"cpu": ["pod-a"]}, False)
    assert stored(kube, "cpu") == (1, ["pod-a"])
    groups = scaler.groups({})
    # pod-a is still up: nothing to forget yet.
    assert scaler.apply(ScalePlan(desired={"cpu": 1}), groups, {}, False, {"pod-a"}) == []
    groups = scaler.groups({})
    done = scaler.apply(ScalePlan(desired={"cpu": 1}), groups, {}, False, {"pod-b"})
    assert done == ["cpu: workersToDelete -= pod-a (deleted)"]
    assert stored(kube, "cpu") == (1, [])


class _SlowScaler:
    """A scaler whose requests take as long as the test says (as the autoscaling
    coordinator's first start does), or fail."""

    mode = "autoscaler"

    def __init__(self, fail: bool = False):
        self.fail, self.release = fail, threading.Event()

    def groups(self, up):
        return [NodeGroup("gpu", Resources(CPU=4, GPU=4), max_nodes=4)]

    def apply(self, plan, groups, release, waiting, alive_pods=None):
        assert self.release.wait(10)
        if self.fail:
            raise ConnectionError("the API is gone")
        return ["request_resources: 1×gpu"]


@pytest.mark.parametrize("fail", [False, True], ids=["requested", "request failed"])
def test_a_pending_gang_says_what_it_waits_for_before_the_request_returns(monkeypatch, fail):
    # Seen on a loaded machine: the nodes came up and the gang ran while the step still
    # waited on its request, so its status never said which nodes it waited for.
    monkeypatch.setattr(scaling_module, "ray_nodes", lambda: {})
    driver = ScaleDriver(ScaleConfig(mode="kuberay", raycluster="rc"))
    driver.scaler = scaler = _SlowScaler(fail)
    notes_when_planned = []

    def planned():
        notes_when_planned.append(driver.note("g"))
        scaler.release.set()  # the request goes out only after the notes were read

    plan = asyncio.run(driver.step(lambda: ClusterSnapshot((), ()), [gang("g", "GPU=1")],
                                   set(), planned=planned))
    (note,) = notes_when_planned
    assert note is not None and note.startswith("waiting for 1 node of group gpu (requested at ")
    if fail:  # nothing was asked for: the notes are the last plan's again (none here)
        assert plan is None and driver.note("g") is None
        assert driver.last_error == "ConnectionError: the API is gone"
    else:
        assert plan is not None and driver.note("g") == note
        assert set(driver.fresh) == {"g"}
