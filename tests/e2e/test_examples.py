"""Every example in examples/ runs, as a user would run it, and shows what it claims.

A user runs an example on its own local cluster (`python examples/x.py`: the README's
first command does so with data_parallel.py on a fresh machine) or on a running one
(`RAY_ADDRESS=... python examples/x.py`, `examples/local_cluster.py`). Here they all run
on one cluster shaped like an example's own (one node, 4 CPUs, 4 virtual GPUs, the
dashboard for Ray Jobs), one after the other, and after each nothing of it is left
there: a cluster's start costs the suite seconds of CPU, six times over."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from ray.cluster_utils import Cluster

from tests.scripts import ROOT, script_env

pytestmark = pytest.mark.own_cluster  # see tests/conftest.py

# After an example: nothing of raygang's left in the cluster, every CPU and GPU free.
IDLE = """
import sys, ray
from tests.integration import leaks
ray.init(address=sys.argv[1], log_to_driver=False)
leaks.wait_until_idle(cluster_resources=True, timeout=30)
"""


@pytest.fixture(scope="module")
def examples_address():
    env = script_env()  # this worker's scripts' temp root: apart from the session cluster
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 4, "num_gpus": 4, "include_dashboard": True, "dashboard_port": 0,
        "dashboard_agent_listen_port": None, "temp_dir": env.get("RAY_TMPDIR")})
    yield cluster.address
    cluster.shutdown()


# Examples that need a cluster of another shape start their own, as a user's run does (one
# that ends frees everything: the example says so itself)
OWN_LOCAL_CLUSTER = {"disaggregated_serve_app.py"}  # 8 virtual GPUs


def run_example(name: str, address: str) -> str:
    env = {**script_env(), "RAY_ADDRESS": address,
           "RAY_AUTH_MODE": "disabled"}  # Cluster() starts its nodes without a token
    if name in OWN_LOCAL_CLUSTER:
        del env["RAY_ADDRESS"]
    done = subprocess.run([sys.executable, f"examples/{name}"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
    if name in OWN_LOCAL_CLUSTER:
        return done.stdout
    idle = subprocess.run([sys.executable, "-c", IDLE, address], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert idle.returncode == 0, f"{name} left something behind:\n{idle.stderr[-2000:]}"
    return done.stdout

EXAMPLES = sorted(p.name for p in (ROOT / "examples").glob("*.py") if p.name != "local_cluster.py")

EXPECTED = {
    "data_parallel.py": [
        "4 members x 1 GPU, SPREAD", "RUNNING   all members ready: released past the launch barrier",
        "rank 3  gpu [", "replicas identical: True",
    ],
    "disaggregated_serving.py": [
        "router -> gnag olleh [decode-0]", "router -> gnihton ro lla [decode-1]",
        "cancelled: CANCELLED; all 4 GPUs free again",
    ],
    "disaggregated_serve_app.py": [
        "training RUNNING on 6 GPUs; 2 GPUs free",
        "pd at priority training: PENDING as a whole (4 replicas)",
        "needs {GPU: 4, CPU: 0.5} in all (PACK, 2×{GPU: 1} + 1×{GPU: 2} + 1×{CPU: 0.5})",
        "Serve applications: []; 2 GPUs free: nothing held, not even prefill's 2",
        "pd as inference: RUNNING in ", "(Decode 1, Prefill 2, Router 1)",
        "  Prefill-1 on node ", "  Decode-0 on node ", "  Router-0 on node ",
        "router -> decode -> prefill: 'gnag olleh'; decode's 2 TP ranks on one node: True",
        "pd grew one ratio step of 2 prefill + 1 decode, serving ",
        "(Decode 2, Prefill 4, Router 1); 0 GPUs free", "why no further: at its maximum (4)",
        "training PENDING (preemptions 1): preempted by deployment pd",
        "pd undeployed; training RUNNING again, same id True, resumed from its checkpoint: True",
        "training cancelled: no raygang placement group left, all 8 GPUs free again",
    ],
    "inference_preempts_training.py": [
        "training-a and training-b RUNNING: all 4 GPUs busy",
        "dry run of deployment chat: preempt: would preempt 1 gang(s)",
        "victims ['training-b']",
        "chat RUNNING, answers: 'hello from a GPU replica'",
        "training-b PENDING (preemptions 1): preempted by deployment chat",
        "training-a RUNNING",
        "training-b RUNNING again, same id True, resumed from steps",
    ],
    "train_job.py": [
        "job resumable RUNNING as Ray job raygang-resumable-",
        "worker 0 starts at step 0",
        "deployment chat RUNNING on 3 GPUs; job PENDING (preemptions 1): preempted by "
        "deployment chat",
        "attempt 0 said: preempted: checkpoint saved at step",
        "same id True; attempt 1 said: worker 0 starts at step",
        "training done: error=None",
    ],
    "elastic_training.py": [
        "other holds 2 GPUs; trainer RUNNING at world size 2 (elastic: 2 to 4)",
        "other ended: trainer grew to 4, live",
        "urgent RUNNING on 2 GPUs: trainer shrank to 2, state RUNNING, preemptions 0, restarts 0",
        "worker-0 and worker-1 the same actors throughout: True, restarts 0, preemptions 0",
        "worker-0 told of worlds of ", "-> 2 -> 4",
    ],
    "all_or_nothing.py": [
        "job A has 2/3 members, job B 2/3, 0 GPUs free -> DEADLOCK",
        "PENDING, holding nothing: needs {GPU: 3} in all", "never both, never half",
    ],
}


def test_every_example_is_covered():
    assert sorted(EXPECTED) == EXAMPLES


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_runs(name, examples_address):
    out = run_example(name, examples_address)
    for line in EXPECTED[name]:
        assert line in out, f"{name}: {line!r} not in output:\n{out}"
    if name in CHECKS:
        CHECKS[name](out)


# "  + 3.21s  prefill-0 (rank 1)": a member and when it became ready, in that order.
READY_LINE = re.compile(r"^\s+\+\s*(\d+\.\d+)s\s+(\w+)-(\d+) \(rank \d+\)$", re.MULTILINE)


def router_ready_last(out: str) -> None:
    ready = [(float(at), role) for at, role, _ in READY_LINE.findall(out)]
    roles = sorted(role for _, role in ready)
    assert roles == ["decode", "decode", "prefill", "prefill", "router"], out
    # Printed in the order they became ready: the router (after=[prefill, decode]) last,
    # strictly after every worker.
    assert ready[-1][1] == "router", out
    assert ready[-1][0] > max(at for at, role in ready[:-1]), out


def resumed_from_the_checkpoint(out: str) -> None:
    saved = int(re.search(r"checkpoint saved at step (\d+)", out).group(1))
    resumed = int(re.search(r"attempt 1 said: worker 0 starts at step (\d+)", out).group(1))
    assert resumed == saved > 0, out
    assert re.search(r"as Ray job raygang-resumable-\w+-[1-9], same id True", out), out


CHECKS = {"disaggregated_serving.py": router_ready_last,
          "train_job.py": resumed_from_the_checkpoint}
