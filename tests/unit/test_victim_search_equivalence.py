"""The fast victim search decides exactly what the plain one does, on random clusters.

The plain search (`raygang.core.preemption.plain`: free every candidate on the
scratch capacity, place after each step, give back) is the definition; the fast one
(victims.py on a Probe/Pool) must reach the same plans, and every plan must be sound.
"""

from __future__ import annotations

import dataclasses
import random

import pytest

from raygang.core import (
    Elastic,
    PendingGang,
    PlacedGang,
    Resources,
    PolicyConfig,
    Strategy,
    schedule,
)

from raygang.core.preemption.check import check
from raygang.core.preemption.plain import searching_plainly

from tests.unit.builders import busy, queue, scattered, spec


SEEDS = range(300)
QUEUES = ["a", "b", "c"]


def scenario(seed: int):
    rng = random.Random(seed)
    nodes = [f"w-{i}: GPU={rng.choice([2, 4, 8])} CPU=16" for i in range(rng.randint(2, 6))]
    free = {f"w-{i}": int(line.split("GPU=")[1].split()[0]) for i, line in enumerate(nodes)}
    running: list[PlacedGang] = []
    for g, where in scattered(rng, free, rng.randint(0, 12), [1, 1, 2, 3]):
        running.append(PlacedGang(
            f"r-{g}", rng.choice([10, 100, 500, 1000]), where,
            queue=rng.choice(QUEUES), preemptible=rng.random() > 0.15,
            running_since=rng.choice([None, 0.0, 50.0, 90.0]),
            min_runtime_s=rng.choice([0, 0, 30]), draining=rng.random() < 0.1,
            elastic=_elastic(rng, len(where)) if rng.random() < 0.3 else None,
        ))
    pending = []
    for g in range(rng.randint(1, 6)):
        cls = rng.choice(["inference", "training", "batch"])
        shape = f"{rng.randint(1, 4)}xGPU={rng.choice([1, 1, 2])}"
        if rng.random() < 0.3:
            shape += " + CPU=1"
        s = spec(f"p-{g}", shape, rng.choice(list(Strategy)), priority=cls,
                 queue=rng.choice(QUEUES))
        if rng.random() < 0.2:  # elastic: admitted at its minimum
            role = s.roles[0]
            s = s.model_copy(update={"roles": (role.model_copy(update={
                "min_replicas": rng.randint(1, role.replicas)}),) + s.roles[1:]})
        pc = CONFIG_CLASSES[cls]
        pending.append(PendingGang(f"p-{g}", s, pc.value, seq=g, preemptible=pc.preemptible,
                                   pending_since=rng.choice([None, 0.0, 80.0])))
    config = PolicyConfig(
        queues=[queue(q, quota=f"GPU={rng.choice([0, 2, 4])}",
                      limit=rng.choice([None, None, "GPU=6"])) for q in QUEUES],
        backfill=rng.random() < 0.5,
        cross_queue_preemption=rng.random() < 0.8,
        preemption={"reclaim_min_runtime_s": rng.choice([0, 0, 60]),
                    "preempt_min_runtime_s": rng.choice([0, 0, 0, 30]),
                    "reclaim_victim_order": rng.choice(["cheapest", "newest"]),
                    "preempt_victim_order": rng.choice(["newest", "newest", "cheapest"])},
        sla_waiting_time_s=rng.choice([None, None, 30.0]),
    )
    # Checkpoints and the reclaim's wait for them, drawn apart: the scenarios above stay
    # what they were.
    more = random.Random(seed + 10**6)
    running = [dataclasses.replace(g, checkpoint_s=more.choice([None, 40.0, 60.0]))
               for g in running]
    config = config.model_copy(update={"preemption": config.preemption.model_copy(update={
        "reclaim_checkpoint_ratio": more.choice([None, None, 0.5, 1.0])}),
        "sla_max_holds": more.choice([1, 1, 3])})
    return busy(*nodes, placed=running), pending, config


def _elastic(rng: random.Random, held: int) -> Elastic:
    """Of a gang's `held` 1-GPU members, the last few beyond its minimum (some being
    removed), and a few more it may add."""
    beyond = rng.randint(0, held - 1)
    leaving = rng.randint(0, beyond) if rng.random() < 0.3 else 0
    names = [f"m-{i}" for i in range(held + 3)]
    low = held - beyond
    return Elastic(rng.choice(list(Strategy)), surplus=tuple(names[low:held - leaving]),
                   leaving=tuple(names[held - leaving:held]),
                   missing=tuple((n, Resources(GPU=1, CPU=1))
                                 for n in names[held:held + rng.randint(0, 3)]))


CONFIG_CLASSES = {c.name: c for c in PolicyConfig().priority_classes}


@pytest.mark.parametrize("chunk", range(3))
def test_fast_and_plain_victim_search_make_the_same_plans(chunk):
    now = 100.0
    for seed in SEEDS[chunk::3]:
        snapshot, pending, config = scenario(seed)
        fast = schedule(snapshot, pending, config, now)
        with searching_plainly():
            plain = schedule(snapshot, pending, config, now)
        assert fast == plain, f"seed {seed}"
        check(fast, snapshot, pending, config)  # sound, as the benchmark's


def test_the_random_scenarios_preempt_and_reclaim():
    actions = set()
    for seed in SEEDS:
        snapshot, pending, config = scenario(seed)
        actions.update(p.action for p in schedule(snapshot, pending, config, 100.0).preemptions)
    assert actions == {"preempt", "reclaim", "shrink"}


def test_the_random_scenarios_shrink_and_grow_elastic_gangs():
    shrunk = grown = 0
    for seed in SEEDS:
        plan = schedule(*scenario(seed)[:2], scenario(seed)[2], 100.0)
        shrunk += sum(1 for p in plan.preemptions if p.members)
        grown += len(plan.growths)
    assert shrunk >= 5 and grown >= 5, (shrunk, grown)

