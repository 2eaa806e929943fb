"""A cycle on the registry's backlog decides exactly what a full cycle decides.

The loop keeps each queue's pending gangs sorted as they come and go, hands a cycle those
lines, and reads the reasons and places of the gangs behind a blocked head only when asked
(`core.backlog`). A full cycle sorts every pending gang afresh and explains each one. On
random event sequences (submissions, cancellations, gangs ending and failing, restart
backoffs, nodes lost and added, queue limits changed, backfill on or off) both must give
the same plan at every cycle: the same admissions and preemptions, for every waiting gang
the same reason and place in line, also as the gang's status shows it, and the same gangs
that more nodes would help (the scale step's candidates).
"""

from __future__ import annotations

import asyncio
import random

import pytest

from raygang.control.memory import MemoryProgram
from raygang.control.program import RoleProgram
from raygang.core import QueueSpec, Resources, schedule
from raygang.core.gang import GangState as S
from raygang.core.scale import scale_candidates

from tests.control.harness import make_cluster, run, stepped_plane
from tests.unit.builders import spec

QUEUES = [QueueSpec(name="default"), QueueSpec(name="a", quota={"GPU": 2}),
          QueueSpec(name="b", limit={"GPU": 4}), QueueSpec(name="c", quota={"GPU": 2})]
SHAPES = ["GPU=1", "2xGPU=1", "4xGPU=1", "CPU=1", "3xGPU=1 + CPU=1", "GPU=2", "8xGPU=1"]
PRIORITIES = ["batch", "training", "inference", 5, 500]


def full_plan(plane, now):
    """The plan of a cycle that sorts and explains every pending gang afresh."""
    pending = [r.pending_view() for r in plane.registry
               if r.state is S.PENDING and r.live.saved and r.cancel_reason is None
               and (r.not_before is None or r.not_before <= now)]
    return pending


async def scenario(seed: int, steps: int) -> int:
    rng = random.Random(seed)
    cluster = make_cluster("n0: GPU=4 CPU=4", "n1: GPU=4 CPU=4", "n2: GPU=2 CPU=8")
    plane = await stepped_plane(cluster, queues=QUEUES, backfill=rng.random() < 0.3)
    compared = 0
    for step in range(steps):
        for _ in range(rng.randint(0, 4)):
            await _submit(plane, rng, f"g{step}")
        await _events(plane, cluster, rng)
        await asyncio.sleep(rng.choice([0, 0.005, 0.02]))  # drivers go on meanwhile
        now = plane._clock()
        backlog = plane.registry.backlog(now)
        snapshot = plane.loop.observe()
        policy = plane.config.policy
        pending = full_plan(plane, now)
        assert sorted(g.gang_id for line in backlog.lines.values() for g in line) == \
            sorted(g.gang_id for g in pending), f"seed {seed} step {step}: the lines"
        incremental = schedule(snapshot, backlog, policy, now)
        full = schedule(snapshot, pending, policy, now)
        assert incremental == full, f"seed {seed} step {step}"
        find = plane.registry.pending_gang  # the gangs more nodes would help: the same
        assert scale_candidates(incremental, find, policy) == \
            scale_candidates(full, find, policy), f"seed {seed} step {step}: scale"
        plane.loop._started = 0.0
        plane.loop._apply(now, incremental, snapshot)
        for gang in pending:  # every waiting gang's status says what the full cycle says
            record = plane.registry.get(gang.gang_id)
            if gang.gang_id in full.waiting and record.state is S.PENDING:
                status = await plane.status(gang.gang_id)
                assert record.wait.message == full.waiting[gang.gang_id].message, \
                    f"seed {seed} step {step} {gang.gang_id}"
                assert status.queue_position == full.positions.get(gang.gang_id)
        compared += len(pending)
    await plane.shutdown()
    return compared


async def _submit(plane, rng, name):
    shape = rng.choice(SHAPES)
    program = MemoryProgram(seconds=rng.choice([0.01, 0.05, None]),
                            fails_after_s=rng.choice([None, None, None, 0.005]))
    s = spec(name, shape, rng.choice(["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]),
             queue=rng.choice([q.name for q in QUEUES]), priority=rng.choice(PRIORITIES),
             max_restarts=rng.choice([0, 1]), preemption_grace_s=rng.choice([0, 0.01]))
    try:
        await plane.submit(s, {r.name: RoleProgram(target=program) for r in s.roles})
    except ValueError:  # could never be admitted here (too big): refused, as it should be
        pass


async def _events(plane, cluster, rng):
    roll = rng.random()
    unfinished = [r for r in plane.registry if not r.state.finished]
    if roll < 0.2 and unfinished:
        await plane.cancel(rng.choice(unfinished).gang_id)
    elif roll < 0.25:
        node = rng.choice(["n0", "n1", "n2"])
        if cluster.nodes[node].alive:
            cluster.lose_node(node)
        else:
            cluster.add_node(node, cluster.nodes[node].total)
    elif roll < 0.3:  # a limit changed under the gangs already waiting
        gpus = rng.choice([1, 2, 4, 8])
        await plane.set_queue(QueueSpec(name="b", limit={"GPU": gpus}))
    elif roll < 0.35:
        cluster.use_outside("n2", rng.choice([Resources(), Resources(GPU=1)]))


@pytest.mark.parametrize("seeds", [range(0, 12), range(12, 24)])
def test_a_cycle_on_the_backlog_decides_what_a_full_cycle_decides(seeds):
    compared = sum(run(lambda: scenario(seed, 25), seed=seed) for seed in seeds)
    assert compared > 500  # the sequences did build up backlogs
