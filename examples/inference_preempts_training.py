"""Inference takes GPUs from training, gracefully, and gives them back.

Two training gangs (2 GPUs each) fill the cluster. A Ray Serve application that needs
2 GPUs is deployed through raygang: it preempts one training gang as a whole (the one
started last), whose members first save a checkpoint in `on_preempt()`. The app serves
HTTP on the GPUs it took. When it is undeployed, the preempted gang — same id, same place
in its queue — runs again and resumes from its checkpoint.

    python examples/inference_preempts_training.py
"""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from pathlib import Path

import ray
from ray import serve

import raygang
from local_cluster import connect

CHECKPOINTS = Path(tempfile.mkdtemp(prefix="raygang-ckpt-"))


@raygang.gang_task(replicas=2, num_gpus=1, num_cpus=0, strategy="STRICT_PACK",
                   preemption_grace_s=30, max_concurrency=2)  # progress() while run() runs
class Trainer:
    def __init__(self):
        ctx = raygang.get_context()
        self.file = CHECKPOINTS / f"{ctx.gang_name}-rank{ctx.rank}.json"
        self.step = json.loads(self.file.read_text())["step"] if self.file.exists() else 0
        self.resumed_from = self.step

    def on_preempt(self):  # called before the members are stopped
        self.file.write_text(json.dumps({"step": self.step}))

    def run(self):
        ctx = raygang.get_context()
        while not ctx.preempted and self.step < 10_000:
            self.step += 1
            time.sleep(0.01)
        return self.step

    def progress(self):
        return self.resumed_from, self.step


@serve.deployment
class Chat:
    async def __call__(self, request) -> str:
        return "hello from a GPU replica"


def wait_for(ref, state: str, timeout: float = 120):
    deadline = time.time() + timeout
    while (status := ref.status()).state.value != state:
        assert time.time() < deadline, status
        time.sleep(0.1)
    return status


def main() -> None:
    connect(num_cpus=4, num_gpus=4)
    raygang.start()
    a = Trainer.options(name="training-a").remote()
    wait_for(a, "RUNNING")
    b = Trainer.options(name="training-b").remote()  # started last: the one to go
    wait_for(b, "RUNNING")
    print("training-a and training-b RUNNING: all 4 GPUs busy")

    spec = raygang.DeploymentSpec(name="chat", replicas=2, resources={"GPU": 1})
    answer = raygang.dry_run(spec)  # decides, does nothing
    print(f"dry run of deployment chat: {answer.outcome}: {answer.reason}; victims "
          f"{[v.name for v in answer.victims]}")

    deployment = raygang.deploy("chat", Chat.bind(), replicas=2, num_gpus=1)
    deployment.ready(timeout=180)
    with urllib.request.urlopen("http://127.0.0.1:8000/chat", timeout=10) as response:
        print(f"chat RUNNING, answers: {response.read().decode()!r}")
    status = wait_for(b, "PENDING")
    print(f"training-b {status.state.value} (preemptions {status.preemptions}): {status.reason}")
    print(f"training-a {a.status().state.value}")
    saved = sorted(json.loads(p.read_text())["step"] for p in CHECKPOINTS.glob("training-b-*"))
    print(f"training-b saved checkpoints at steps {saved}")

    raygang.undeploy("chat")
    print("chat undeployed")
    status = wait_for(b, "RUNNING")
    resumed = [h.progress.remote() for h in b.handles()[Trainer.role_name]]
    print(f"training-b RUNNING again, same id {status.gang_id == b.gang_id}, resumed from "
          f"steps {sorted(r for r, _ in ray.get(resumed))}")
    for ref in (a, b):
        ref.cancel()
    raygang.shutdown()
    serve.shutdown()  # else the local cluster's exit waits a long time on Serve's actors


if __name__ == "__main__":
    main()
