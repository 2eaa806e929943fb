"""On 8 GPUs, two 6-GPU gangs: exactly one runs; the other holds nothing until it ends."""

from __future__ import annotations

import asyncio
import collections
import os
import time

import ray
from ray.util.placement_group import placement_group_table

import raygang
from raygang import GangState
from tests.integration import leaks

ROUNDS = int(os.environ.get("RAYGANG_ALL_OR_NOTHING_ROUNDS", "1"))  # more: a longer hunt
GPUS = 8


@ray.remote(num_cpus=0)
class Gate:
    """Holds members at work until the test has looked at the cluster."""

    def __init__(self):
        self.opened = collections.defaultdict(asyncio.Event)

    async def wait(self, key):
        await self.opened[key].wait()

    async def open(self, key):
        self.opened[key].set()


# 6 GPUs as 2 members of 3 (no node here has more than 4).
@raygang.gang_task(replicas=2, num_gpus=3, num_cpus=0, strategy="PACK")
def hold_gpus(gate, key):
    started = time.time()
    ray.get(gate.wait.remote(key))
    return (started, time.time())


def _holds(gang_id: str) -> tuple[list[str], list[str]]:
    """The gang's placement groups (any state but removed) and member actors."""
    pgs = [pg["state"] for pg in placement_group_table().values()
           if pg["name"] == f"raygang-{gang_id}" and pg["state"] != "REMOVED"]
    actors = [a for a in leaks.raygang_member_actors() if a.startswith(f"raygang-{gang_id}-")]
    return pgs, actors


def _free_gpus_settle_at(expected: float, timeout: float = 5) -> float:
    """Free GPUs once they read `expected` (Ray's view lags a placement group's changes by
    tens of ms), or what they read at the deadline."""
    deadline = time.time() + timeout
    while (gpus := ray.available_resources().get("GPU", 0)) != expected and time.time() < deadline:
        time.sleep(0.05)
    return gpus


def _one_round(gate, round_: int) -> None:
    refs = [hold_gpus.options(name=f"six-{round_}-{i}").remote(gate, round_) for i in range(2)]
    try:
        deadline = time.time() + 60
        while True:  # until one runs; never both past PENDING at once
            states = [r.status() for r in refs]
            started = [s for s in states if s.state is not GangState.PENDING]
            assert len(started) <= 1, f"round {round_}: both left PENDING {states}"
            if started and started[0].state is GangState.RUNNING:
                break
            assert not any(s.finished for s in states), states
            assert time.time() < deadline, f"round {round_}: none running {states}"
            time.sleep(0.02)
        first = next(r for r in refs if r.gang_id == started[0].gang_id)
        second = next(r for r in refs if r is not first)
        # The first holds its members at the gate: it runs for as long as we look.
        gpus = _free_gpus_settle_at(GPUS - 6)
        states = {r.gang_id: r.status() for r in refs}
        assert states[first.gang_id].state is GangState.RUNNING, states
        waiting = states[second.gang_id]
        assert waiting.state is GangState.PENDING, f"round {round_}: {states}"
        assert "needs {GPU: 6}" in waiting.reason, waiting.reason
        assert _holds(second.gang_id) == ([], []), f"round {round_}: {_holds(second.gang_id)}"
        assert gpus == GPUS - 6, f"round {round_}: {gpus} GPUs free while one gang runs"
        ray.get(gate.open.remote(round_))
        spans = {r.gang_id: r.result(timeout=60) for r in refs}
    finally:
        ray.get(gate.open.remote(round_))
        for ref in refs:
            if not ref.status().finished:
                ref.cancel()
    # Never both: the second gang's members started after every member of the first ended.
    end_first = max(e for _, e in spans[first.gang_id])
    assert min(s for s, _ in spans[second.gang_id]) >= end_first, f"round {round_} overlapped"


def test_two_six_gpu_gangs_on_eight_gpus(ray_cluster):
    assert ray.cluster_resources().get("GPU") == GPUS
    gate = Gate.remote()
    checked = 0
    try:
        for round_ in range(ROUNDS):
            _one_round(gate, round_)
            checked += 1
            leaks.wait_until_idle()  # the next round starts from an empty cluster
    finally:
        ray.kill(gate)
    assert checked == ROUNDS
