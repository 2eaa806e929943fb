"""On 8 GPUs, two 6-GPU gangs: exactly one runs; the other holds nothing until it ends."""

from __future__ import annotations

import time

import raygang
from raygang import GangState
from tests.integration import leaks

ROUNDS = 20


@raygang.gang_task(replicas=2, num_gpus=3, num_cpus=0, strategy="PACK")
def hold_gpus(seconds):
    started = time.time()
    time.sleep(seconds)
    return (started, time.time())


def test_two_six_gpu_gangs_on_eight_gpus(ray_cluster):
    for round_ in range(ROUNDS):
        refs = [hold_gpus.options(name=f"six-{round_}-{i}").remote(0.4) for i in range(2)]
        # Watch until one of them runs, then look at the other while the first still runs.
        deadline = time.time() + 60
        while True:
            states = [r.status() for r in refs]
            running = [s for s in states if s.state is GangState.RUNNING]
            if running:
                break
            assert time.time() < deadline, states
            time.sleep(0.02)
        assert len(running) == 1, f"round {round_}: both running {states}"
        other = next(s for s in states if s.gang_id != running[0].gang_id)
        other = next(r for r in refs if r.gang_id == other.gang_id).status()
        if other.state is GangState.PENDING:  # the first may already be done: then skip
            assert "needs {GPU: 6}" in other.reason
            held = {pg["name"] for pg in leaks.raygang_placement_groups()}
            assert f"raygang-{other.gang_id}" not in held
            assert not [a for a in leaks.raygang_member_actors() if other.gang_id in a]
        first, second = sorted((r.result(timeout=60) for r in refs), key=lambda res: res[0][0])
        # Never both: the second gang's members started after every member of the first ended.
        assert min(s for s, _ in second) >= max(e for _, e in first), f"round {round_} overlapped"
