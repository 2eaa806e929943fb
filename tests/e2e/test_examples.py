"""Every example in examples/ runs, as a user would run it, and shows what it claims."""

from __future__ import annotations

import re

import pytest

from tests.scripts import ROOT, run_script

pytestmark = pytest.mark.own_cluster  # see tests/conftest.py

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
def test_example_runs(name):
    out = run_script(f"examples/{name}", timeout=240)
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
