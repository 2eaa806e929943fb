"""A Ray Serve deployment takes GPUs from training, gracefully, and gives them back."""

from __future__ import annotations

import json
import urllib.request

import pytest
import ray
from ray import serve

import raygang
from raygang import GangState
from tests.integration import leaks
from tests.integration.helpers import wait_state
from tests.integration.test_preemption import Trainer, train_fn


@serve.deployment(graceful_shutdown_timeout_s=2)
class Echo:
    async def __call__(self, request):
        return {"node": ray.get_runtime_context().get_node_id(), "gpus": ray.get_gpu_ids()}


def _get(port: int, path: str) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as response:
        return json.loads(response.read())


def test_deployment_preempts_training_serves_and_training_resumes(ray_cluster, http_port,
                                                                  tmp_path):
    marks = tmp_path / "checkpoints.txt"
    first = train_fn.options(name="first").remote(str(marks))
    second = None
    llm = None
    try:
        wait_state(first, GangState.RUNNING)
        second = Trainer.options(name="second").remote(str(marks))  # started last: the victim
        wait_state(second, GangState.RUNNING)
        victim_node = second.status().members[0].node_id

        llm = raygang.deploy("llm", Echo.bind(), replicas=2, num_gpus=2,
                             strategy="STRICT_PACK")
        status = llm.ready(timeout=120)
        assert status.kind == "deployment" and status.priority == 1000

        # Exactly one training gang was preempted; its on_preempt ran in every member.
        victim = wait_state(second, GangState.PENDING, timeout=30)
        assert victim.reason.startswith("preempted by deployment llm")
        assert victim.preemptions == 1
        assert sorted(line.rsplit(" ", 1)[0] for line in marks.read_text().splitlines()) == [
            f"second rank {r} attempt 0" for r in range(4)]
        assert first.status().state is GangState.RUNNING
        # raygang's own reservation went to Serve: only the running training gang holds one
        assert [pg["name"] for pg in leaks.raygang_placement_groups()] == [
            f"raygang-{first.gang_id}"]
        assert len(leaks.serve_gang_pgs()) == 1

        # The app answers HTTP, from replicas on the GPUs the victim gave up.
        answers = [_get(http_port, "/llm") for _ in range(10)]
        assert {a["node"] for a in answers} == {victim_node}
        assert all(len(a["gpus"]) == 2 for a in answers)
        assert [d.gang_id for d in raygang.list_deployments()] == [llm.gang_id]

        with pytest.raises(raygang.DeploymentExistsError, match="deployment 'llm' exists"):
            raygang.deploy("llm", Echo.bind(), num_gpus=1)

        # Undeploy: the capacity is free again and the requeued training resumes.
        gone = raygang.undeploy("llm")
        llm = None
        assert gone.state is GangState.CANCELLED and gone.reason == "undeployed"
        assert leaks.serve_gang_pgs() == []
        resumed = wait_state(second, GangState.RUNNING, timeout=60)
        assert resumed.preemptions == 1 and resumed.gang_id == second.gang_id
    finally:
        if llm is not None:
            raygang.undeploy("llm")
        for ref in (first, second):
            if ref is not None:
                ref.cancel()


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
