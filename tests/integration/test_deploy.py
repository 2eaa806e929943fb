"""A Ray Serve deployment takes GPUs from training, gracefully, and gives them back; an
application of several deployments does so as one gang."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest
import ray
from ray import serve
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import raygang
from raygang import GangState
from tests.integration import leaks
from raygang.runtime.ray_private import serve_details
from tests.integration.helpers import restart_scheduler, wait_state


@serve.deployment(graceful_shutdown_timeout_s=2)
class Echo:
    async def __call__(self, request):
        return {"node": ray.get_runtime_context().get_node_id(), "gpus": ray.get_gpu_ids()}


def _get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as response:
        return json.loads(response.read())


def test_deploy_validates_its_spec_at_the_edge():
    with pytest.raises(raygang.SpecError) as error:
        raygang.deploy("bad name!", Echo.bind(), replicas=0, num_gpus=1)
    message = str(error.value)
    assert "name: String should match pattern" in message
    assert "replicas: Input should be greater than or equal to 1" in message
    with pytest.raises(raygang.SpecError, match="import_path: String should match"):
        raygang.deploy("x", "not an import path")


def test_a_deployment_deleted_behind_raygangs_back_fails_and_frees_its_gpus(ray_cluster,
                                                                             http_port):
    ref = raygang.deploy("side", Echo.bind(), num_gpus=1)
    ref.ready(timeout=120)
    serve.delete("side")  # not through raygang
    status = ref.wait(timeout=30)
    assert status.state is GangState.FAILED
    assert status.error.message == "Serve application 'side' was deleted outside raygang"


# A disaggregated service (Serve LLM's shape: router -> decode -> prefill), stub models:
# prefill 2 x 1 GPU, decode 1 replica of 2 GPUs (TP=2: two bundles, one node), a router of
# no GPU. 4 GPUs in all, each replica as its deployment says (raygang reads it).
@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0, "num_gpus": 1},
                  graceful_shutdown_timeout_s=1)
class PdPrefill:
    def prefill(self, prompt: str) -> list[int]:
        return [ord(c) for c in prompt]


@ray.remote(num_cpus=0, num_gpus=1)
def _tp_rank(kv: list[int]) -> tuple[str, str]:
    return "".join(chr(t) for t in reversed(kv)), ray.get_runtime_context().get_node_id()


@serve.deployment(ray_actor_options={"num_cpus": 0, "num_gpus": 1},
                  placement_group_bundles=[{"GPU": 1}, {"GPU": 1}],
                  placement_group_strategy="STRICT_PACK", graceful_shutdown_timeout_s=1)
class PdDecode:
    def __init__(self, prefill):
        self.prefill = prefill

    async def generate(self, prompt: str) -> dict:
        kv = await self.prefill.prefill.remote(prompt)
        text, rank1 = await _tp_rank.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            ray.util.get_current_placement_group(), 1)).remote(kv)
        return {"text": text, "node": ray.get_runtime_context().get_node_id(), "rank1": rank1}


@serve.deployment(ray_actor_options={"num_cpus": 0.5}, graceful_shutdown_timeout_s=1)
class PdRouter:
    def __init__(self, decode):
        self.decode = decode

    async def __call__(self, request) -> dict:
        return await self.decode.generate.remote(request.query_params["prompt"])


PD_APP = PdRouter.bind(PdDecode.bind(PdPrefill.bind()))


@raygang.gang_task(replicas=2, num_gpus=3, num_cpus=0, strategy="STRICT_SPREAD",
                   preemption_grace_s=5)
def hold_gpus() -> None:
    """Training on 3 GPUs of each worker: 1 free on each, room for prefill only."""
    ctx = raygang.get_context()
    while not ctx.preempted:
        time.sleep(0.05)


def _gpus_free() -> float:
    return ray.available_resources().get("GPU", 0.0)


def test_an_application_of_several_deployments_is_one_gang(ray_cluster, http_port):
    timings: dict[str, float] = {}
    started = time.monotonic()
    training = hold_gpus.options(name="hold").remote()
    pd = None
    try:
        wait_state(training, GangState.RUNNING)
        assert _gpus_free() == 2

        # Same priority: it may not preempt, and it waits whole, holding nothing (the 2
        # free GPUs would fit prefill's replicas, not decode's).
        pd = raygang.deploy("pd", PD_APP, priority="training")
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:  # several cycles: nothing of it ever starts
            status = pd.status()
            assert status.state is GangState.PENDING, status
            assert "pd" not in serve.status().applications
            assert [pg["name"] for pg in leaks.raygang_placement_groups()] == [
                f"raygang-{training.gang_id}"]
            assert _gpus_free() == 2 and not leaks.serve_gang_pgs()
            time.sleep(0.2)
        assert status.world_size == 4
        assert "needs {GPU: 4, CPU: 0.5} in all (PACK, 2×{GPU: 1} + 1×{GPU: 2} + " \
            "1×{CPU: 0.5})" in status.reason, status.reason
        assert raygang.undeploy("pd").state is GangState.CANCELLED
        timings["waits whole"] = time.monotonic() - started

        # As inference: the training gang goes (whole), the app comes up whole.
        pd = raygang.deploy("pd", PD_APP)
        status = pd.ready(timeout=120)
        timings["preempts and runs"] = time.monotonic() - started
        victim = wait_state(training, GangState.PENDING, timeout=30)
        assert victim.reason.startswith("preempted by deployment pd") and victim.preemptions == 1
        assert _gpus_free() == 4  # the app's 4, and nothing else
        # raygang's reservation went to Serve: no raygang group is left, Serve's hold it
        assert leaks.raygang_placement_groups() == [] and leaks.serve_gang_pgs()
        assert [d.gang_id for d in raygang.list_deployments() if not d.state.finished] == [
            pd.gang_id]
        with pytest.raises(raygang.DeploymentExistsError, match="deployment 'pd' exists"):
            raygang.deploy("pd", Echo.bind(), num_gpus=1)
        # Each deployment runs exactly on its role's nodes
        booked: dict[str, list[str]] = {}
        for member in status.members:
            booked.setdefault(member.role, []).append(member.node_id)
        deployments = serve_details()["applications"]["pd"]["deployments"]
        placed = {name: sorted(r["node_id"] for r in d["replicas"])
                  for name, d in deployments.items()}
        assert placed == {role: sorted(nodes) for role, nodes in booked.items()}
        answer = _get(http_port, "/pd?prompt=hello%20gang")
        assert answer["text"] == "gnag olleh"
        assert answer["rank1"] == answer["node"] == booked["PdDecode"][0]  # TP=2 on one node

        # A restarted scheduler adopts it, whole, as it runs (never redeployed)
        replicas = {n: [r["replica_id"] for r in d["replicas"]] for n, d in deployments.items()}
        restart_scheduler()
        adopted = pd.status()
        assert adopted.state is GangState.RUNNING and adopted.members == status.members
        assert any("adopted by the restarted scheduler" in e.reason for e in adopted.events)
        assert {n: [r["replica_id"] for r in d["replicas"]] for n, d in
                serve_details()["applications"]["pd"]["deployments"].items()} == replicas
        assert _get(http_port, "/pd?prompt=ab")["text"] == "ba"
        timings["adopted"] = time.monotonic() - started

        gone = raygang.undeploy("pd")
        pd = None
        assert gone.state is GangState.CANCELLED and gone.reason == "undeployed"
        assert leaks.serve_gang_pgs() == []
        resumed = wait_state(training, GangState.RUNNING, timeout=60)
        assert resumed.gang_id == training.gang_id and resumed.preemptions == 1
        timings["training resumed"] = time.monotonic() - started
    finally:
        if pd is not None:
            raygang.undeploy("pd")
        training.cancel()
    print(", ".join(f"{what} at {at:.1f}s" for what, at in timings.items()))
