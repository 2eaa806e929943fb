"""A Ray Train V2 script, unchanged, run as a raygang job: queued, preempted by inference
through Train's own preemption path, and resumed from its checkpoint.

`examples/jobs/train.py` is a plain Train script (2 workers x 1 GPU). Submitted with
`raygang.submit_job`, it waits for its 2 GPUs in raygang's queue and starts through Ray's
Job Submission API; its Train run is placed inside the job's 2 GPUs (raygang sets
`RAY_TRAIN_CALLBACKS` for the job). A Serve deployment that needs 3 of the 4 GPUs then
preempts it: Train tells its workers (`ray.train.get_preemption_info()`), they checkpoint,
and the job goes back to its queue holding nothing. When the deployment is removed, the
job starts its script again, and the run resumes from that checkpoint.

    python examples/train_job.py
"""

from __future__ import annotations

import re
import sys
import tempfile
import time
from pathlib import Path

from ray import serve

import raygang
from local_cluster import connect

SCRIPT = Path(__file__).parent / "jobs" / "train.py"


@serve.deployment
class Chat:
    def __call__(self, request) -> str:
        return "hello"


def wait_for(job: raygang.JobRef, text: str, timeout: float = 240) -> str:
    deadline = time.time() + timeout
    while text not in (logs := job.logs()):
        status = job.status()
        if status.finished or time.time() > deadline:
            raise RuntimeError(f"{text!r} not in the job's output ({status.state.value}: "
                               f"{status.reason}):\n{logs}")
        time.sleep(0.5)
    return logs


def said(logs: str, text: str) -> str:
    """The last output line with `text`, without Ray's colour codes and process prefix."""
    lines = [re.sub(r"\x1b\[[0-9;]*m", "", line) for line in logs.splitlines() if text in line]
    return lines[-1].split(") ", 1)[-1] if lines else f"({text!r} not in the output)"


def main() -> None:
    connect(num_cpus=4, num_gpus=4, dashboard=True)
    storage = tempfile.mkdtemp(prefix="raygang-train-")
    job = raygang.submit_job(f"{sys.executable} {SCRIPT} {storage} 40", gpus=2,
                             name="resumable", preemption_grace_s=8,
                             max_restarts=2)  # a failed attempt runs the script again
    wait_for(job, "worker 0 starts at step 0")
    status = job.status()
    print(f"job {status.name} {status.state.value} as Ray job {status.ray_job_id}: "
          "worker 0 starts at step 0")

    chat = raygang.deploy("chat", Chat.bind(), num_gpus=3)
    chat.ready(timeout=120)
    status = job.status()
    print(f"deployment chat RUNNING on 3 GPUs; job {status.state.value} "
          f"(preemptions {status.preemptions}): {status.reason}")
    saved = wait_for(job, "checkpoint saved", timeout=60)
    print(f"  attempt 0 said: {said(saved, 'checkpoint saved')}")

    chat.undeploy()
    final = job.wait(timeout=180)
    logs = job.logs()
    print(f"job {final.state.value} as Ray job {final.ray_job_id}, same id "
          f"{final.gang_id == job.gang_id}; attempt 1 said: {said(logs, 'starts at step')}")
    print(f"  {said(logs, 'training done')}")
    if final.error is not None:  # what went wrong, and the events that led there
        print(f"  error: {final.error.summary}")
        for event in final.events[-8:]:
            print(f"    {event.to_state.value}: {event.reason}")
    raygang.shutdown()


if __name__ == "__main__":
    main()
