"""Disaggregated serving on Ray Serve as one gang: a router, prefill replicas and decode
replicas of 2 GPUs (tensor parallel 2), deployed under contention with a training gang, and
scaled in whole prefill:decode ratio steps.

The application is Serve LLM's prefill/decode shape (`build_pd_openai_app`: ingress ->
decode -> prefill; each replica one placement group of TP x PP bundles), with stub models:
3 deployments, at least 2 prefill replicas of 1 GPU and 1 decode replica of 2 GPUs. A
training gang in queue `research` holds 6 of the cluster's 8 GPUs. The 2 free ones would fit both prefill
replicas, but an app with prefill and no decode serves nothing: raygang admits the
application whole or not at all. At the training gang's priority it waits, holding
nothing; as `inference` it preempts the training gang (whole, after its checkpoint), and
every deployment comes up on the nodes raygang reserved for it. A request goes through the
router to decode, which asks prefill first. Prefill (2 to 4 replicas) and decode (1 to 2)
are elastic with a ratio of 2:1: the app grows by whole steps of 2 prefill and 1 decode
replica, never prefill alone. After `undeploy`, the training gang resumes from its
checkpoint.

    python examples/disaggregated_serve_app.py
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from pathlib import Path

import ray
from ray import serve
from ray.util import placement_group_table
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import raygang
from local_cluster import connect


CHECKPOINTS = Path(tempfile.mkdtemp(prefix="raygang-ckpt-"))


@raygang.gang_task(replicas=2, num_gpus=3, num_cpus=0, preemption_grace_s=10,
                   max_concurrency=2)  # progress() while run() runs
class Trainer:
    def __init__(self):
        self.file = CHECKPOINTS / f"rank{raygang.get_context().rank}.json"
        self.step = json.loads(self.file.read_text())["step"] if self.file.exists() else 0
        self.resumed_from = self.step

    def on_preempt(self):  # called before the members are stopped
        self.file.write_text(json.dumps({"step": self.step}))

    def run(self):
        ctx = raygang.get_context()
        while not ctx.preempted:
            self.step += 1
            time.sleep(0.01)

    def progress(self):
        return self.resumed_from


# Stub models. Each deployment says what a replica needs, as Serve LLM's do: raygang reads it.
@serve.deployment(num_replicas=2, ray_actor_options={"num_cpus": 0, "num_gpus": 1},
                  graceful_shutdown_timeout_s=1)
class Prefill:
    def __init__(self, model: str):
        self.model = model

    def prefill(self, prompt: str) -> list[int]:
        return [ord(c) for c in prompt]  # the "KV cache"


@ray.remote
class TensorParallelWorker:
    def decode(self, kv: list[int]) -> tuple[str, str]:
        return "".join(chr(t) for t in reversed(kv)), ray.get_runtime_context().get_node_id()


@serve.deployment(ray_actor_options={"num_cpus": 0, "num_gpus": 1},
                  placement_group_bundles=[{"GPU": 1}, {"GPU": 1}],  # TP=2: one per rank
                  placement_group_strategy="STRICT_PACK", graceful_shutdown_timeout_s=1)
class Decode:
    def __init__(self, model: str, prefill):
        self.prefill = prefill
        # rank 1 of the tensor-parallel group, in the replica's second bundle
        self.rank1 = TensorParallelWorker.options(num_cpus=0, num_gpus=1, scheduling_strategy=(
            PlacementGroupSchedulingStrategy(ray.util.get_current_placement_group(), 1))
        ).remote()

    async def generate(self, prompt: str) -> dict:
        kv = await self.prefill.prefill.remote(prompt)
        text, rank1_node = await self.rank1.decode.remote(kv)
        return {"text": text,
                "tp_on_one_node": rank1_node == ray.get_runtime_context().get_node_id()}


@serve.deployment(ray_actor_options={"num_cpus": 0.5}, graceful_shutdown_timeout_s=1)
class Router:
    def __init__(self, decode):
        self.decode = decode

    async def __call__(self, request) -> dict:
        return await self.decode.generate.remote(request.query_params["prompt"])


app = Router.bind(Decode.bind("tiny-llm", Prefill.bind("tiny-llm")))


def wait_for(ref, state: str, timeout: float = 120):
    deadline = time.time() + timeout
    while (status := ref.status()).state.value != state:
        assert time.time() < deadline, status
        time.sleep(0.1)
    return status


def gpus_free() -> float:
    return ray.available_resources().get("GPU", 0)


def serving_replicas(app_name: str) -> dict[str, int]:
    """Serve's own count of each deployment's RUNNING replicas."""
    deployments = serve.status().applications[app_name].deployments
    return {name: d.replica_states.get("RUNNING", 0) for name, d in deployments.items()}


def roles(status) -> str:
    return ", ".join(f"{r.role} {r.size}" for r in sorted(status.roles, key=lambda r: r.role))


def main() -> None:
    connect(num_cpus=4, num_gpus=8)
    # Training in a queue of its own: a pending gang holds back growth only in its own queue
    raygang.start(raygang.SchedulerConfig(queues=[raygang.QueueSpec(name="default"),
                                                  raygang.QueueSpec(name="research")]))
    training = Trainer.options(name="training", queue="research").remote()
    wait_for(training, "RUNNING")
    print(f"training RUNNING on 6 GPUs; {gpus_free():g} GPUs free")

    # Same priority as training: it may not preempt, and it does not fit beside it.
    pd = raygang.deploy("pd", app, priority="training")
    time.sleep(3)
    status = pd.status()
    print(f"pd at priority training: {status.state.value} as a whole ({status.world_size} "
          f"replicas)\n  {status.reason}")
    print(f"  Serve applications: {sorted(serve.status().applications)}; "
          f"{gpus_free():g} GPUs free: nothing held, not even prefill's 2")
    raygang.undeploy("pd")

    # As inference: the training gang is preempted whole, the app comes up whole, at its
    # minimum, then grows in whole steps of 2 prefill + 1 decode replica while room is free.
    started = time.time()
    pd = raygang.deploy("pd", app, ratio={"Prefill": 2, "Decode": 1},
                        deployments={"Prefill": {"replicas": (2, 4)},
                                     "Decode": {"replicas": (1, 2)}})  # priority "inference"
    status = pd.ready(timeout=180)
    print(f"pd as inference: {status.state.value} in {time.time() - started:.1f}s "
          f"({roles(status)})")
    for member in sorted(status.members, key=lambda m: m.rank):
        print(f"  {member.role}-{member.index} on node {member.node_id[:8]}")
    url = "http://127.0.0.1:8000/pd?prompt=hello%20gang"
    with urllib.request.urlopen(url, timeout=30) as response:
        answer = json.loads(response.read())
    print(f"router -> decode -> prefill: {answer['text']!r}; decode's 2 TP ranks on one "
          f"node: {answer['tp_on_one_node']}")
    deadline = time.time() + 180
    while True:  # until Serve runs the grown replicas
        status = pd.status()
        if serving_replicas("pd") == {"Decode": 2, "Prefill": 4, "Router": 1}:
            break
        assert time.time() < deadline, (roles(status), serving_replicas("pd"))
        time.sleep(0.2)
    grown = next(r for r in status.roles if r.role == "Prefill")
    print(f"pd grew one ratio step of {grown.step} prefill + 1 decode, serving "
          f"{time.time() - started:.1f}s after deploy ({roles(status)}); "
          f"{gpus_free():g} GPUs free")
    print(f"  why no further: {grown.grow_reason}")
    victim = wait_for(training, "PENDING")
    print(f"training {victim.state.value} (preemptions {victim.preemptions}): "
          f"{victim.reason.split(';')[0]}")

    raygang.undeploy("pd")
    resumed = wait_for(training, "RUNNING")
    steps = ray.get([h.progress.remote() for h in training.handles()[Trainer.role_name]])
    print(f"pd undeployed; training RUNNING again, same id {resumed.gang_id == training.gang_id}, "
          f"resumed from its checkpoint: {all(s > 0 for s in steps)}")
    training.cancel()
    deadline = time.time() + 60
    while (left := [g for g in placement_group_table().values()
                    if g["name"].startswith("raygang-") and g["state"] != "REMOVED"]) \
            or gpus_free() < 8:
        assert time.time() < deadline, (left, gpus_free())
        time.sleep(0.2)
    print(f"training cancelled: no raygang placement group left, all {gpus_free():g} GPUs "
          "free again")
    raygang.shutdown()
    serve.shutdown()  # else the local cluster's exit waits a long time on Serve's actors


if __name__ == "__main__":
    main()
