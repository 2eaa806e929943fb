"""A cycle dumped from the control plane (`debug_cycle`) replays to the plan the loop made.

The plane runs on the in-memory cluster through random event sequences (those of
test_backlog_equivalence: submissions of every shape, strategy and priority, failures,
cancellations, lost and added nodes, queue limits changed), with elastic gangs growing and
shrinking beside them; at each step a dump is asked for and the cycle that answers it is
replayed from the dump's JSON text.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

import raygang.control.dumps as dumps_module
from raygang.control.memory import MemoryProgram
from raygang.control.program import RoleProgram
from raygang.core.cycle_dump import load_cycle
from raygang.core.gang import GangState as S
from raygang.core.plan_data import plan_data
from raygang.core.reasons import Reasons
from raygang.core.queues import QueueSpec
from raygang.core.spec import RoleSpec

from tests.control.harness import make_cluster, make_plane, run, stepped_plane, submit
from tests.control.test_backlog_equivalence import QUEUES, _events, _submit
from tests.unit.builders import spec


async def _elastic(plane, rng, name):
    low = rng.randint(1, 2)
    s = spec(name, "GPU=1", rng.choice(["PACK", "SPREAD"]), queue=rng.choice(["a", "c"]),
             priority=rng.choice(["batch", "training"])).model_copy(update={"roles": (
                 RoleSpec(name="worker", replicas=(low, low + 2), resources={"GPU": 1}),)})
    try:
        await plane.submit(s, {"worker": RoleProgram(target=MemoryProgram(
            seconds=rng.choice([0.05, None]), on_preempt="hook"))})
    except ValueError:  # could never be admitted here (every node lost): refused
        pass


async def _dumped_cycle(plane) -> dict:
    """Ask for a dump, then run the cycle that answers it (by hand, as the loop would)."""
    asked = asyncio.ensure_future(plane.debug_cycle(timeout_s=5))
    while not plane.loop._dumps:  # until the request is in
        await asyncio.sleep(0)
    plane.loop.cycle()
    return await asked


async def scenario(seed: int, steps: int) -> tuple[int, set[str]]:
    rng = random.Random(seed)
    cluster = make_cluster("n0: GPU=4 CPU=4", "n1: GPU=4 CPU=4", "n2: GPU=2 CPU=8")
    plane = await stepped_plane(cluster, queues=QUEUES, backfill=rng.random() < 0.3)
    decided: set[str] = set()
    compared = 0
    for step in range(steps):
        for _ in range(rng.randint(0, 3)):
            await _submit(plane, rng, f"g{step}")
        if rng.random() < 0.3:
            await _elastic(plane, rng, f"e{step}")
        await _events(plane, cluster, rng)
        await asyncio.sleep(rng.choice([0, 0.005, 0.02]))  # drivers go on meanwhile
        now = plane._clock()
        due = {r.gang_id for r in plane.registry.pending()
               if r.not_before is None or r.not_before <= now}
        dump = await _dumped_cycle(plane)
        loaded = load_cycle(json.dumps(dump))
        where = f"seed {seed} step {step}"
        assert dump["plan"] == json.loads(json.dumps(plan_data(plane.loop.last_plan))), where
        assert loaded.difference(loaded.replay()) is None, where
        pending = {g.gang_id for line in loaded.backlog.values() for g in line}
        assert loaded.now == now and pending == due, where
        compared += len(pending)
        decided |= {a["action"] for a in dump["plan"]["admissions"]}
        decided |= {p["action"] for p in dump["plan"]["preemptions"]}
        decided |= {"grow" for _ in dump["plan"]["growths"]}
        await asyncio.sleep(0.01)
    await plane.shutdown()
    return compared, decided


@pytest.mark.parametrize("seeds", [range(0, 6), range(6, 12)])
def test_a_cycle_dumped_from_the_plane_replays_to_the_plan_it_made(seeds):
    compared, decided = 0, set()
    for seed in seeds:
        n, kinds = run(lambda: scenario(seed, 20), seed=seed)
        compared += n
        decided |= kinds
    assert compared > 200  # the sequences did build up backlogs
    assert {"allocate", "preempt", "grow"} <= decided, decided


def test_a_dump_asked_of_a_running_plane_with_nothing_pending_runs_a_cycle():
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=2 CPU=4"), queues=[
            QueueSpec(name="default"), QueueSpec(name="q", limit={"GPU": 1})],
            backfill_lookahead=0)  # strict FIFO: the third waits behind the second
        await plane.ready()
        idle = await plane.debug_cycle()
        assert idle["backlog"] == {} and idle["plan"]["admissions"] == []
        first, second, third = [await submit(plane, name, "GPU=1", queue="q", seconds=None)
                                 for name in ("first", "second", "third")]
        while plane.registry.get(first).state is not S.RUNNING:
            await asyncio.sleep(0.01)
        dump = await plane.debug_cycle()
        assert [g["gang_id"] for g in dump["backlog"]["q"]] == [second, third]
        assert [g["gang_id"] for g in dump["snapshot"]["placed"]] == [first]
        waiting = dump["plan"]["waiting"]
        assert (waiting[second]["code"], waiting[third]["code"]) == ("LIMIT", "BEHIND")
        loaded = load_cycle(json.dumps(dump))
        assert loaded.difference(loaded.replay()) is None
        # The comparison sees a change of input: a larger limit admits the second gang.
        dump["config"]["queues"][1]["limit"] = {"GPU": 2}
        wider = load_cycle(json.dumps(dump))
        assert wider.difference(wider.replay()).startswith("plan.admissions: recorded 0 items")
        await plane.shutdown()

    run(scenario)


def test_cycles_not_asked_for_dump_nothing(monkeypatch):
    def no(*args, **kwargs):
        raise AssertionError("a cycle nobody asked a dump of wrote one")

    monkeypatch.setattr(dumps_module, "dump_cycle", no)
    monkeypatch.setattr(dumps_module, "plan_data", no)

    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=2 CPU=4"))
        ids = [await submit(plane, f"g{i}", "2xGPU=1", seconds=0.05) for i in range(3)]
        for gang_id in ids:
            assert (await plane.wait(gang_id, timeout=5)).state is S.SUCCEEDED
        assert plane.loop.cycles >= 3 and plane.loop.last_error is None
        await plane.shutdown()

    run(scenario)


def test_a_cycle_that_fails_is_dumped_with_its_error_and_the_loop_goes_on():
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=2 CPU=4"))
        await plane.ready()
        decide = plane.loop._decide

        def broken(snapshot, backlog, config, now):
            raise RuntimeError(f"broken at {now:g}")

        plane.loop._decide = broken
        gang_id = await submit(plane, "g", "GPU=1", seconds=0.05)
        dump = await plane.debug_cycle()
        assert dump["plan"] is None
        assert dump["error"] == f"RuntimeError: broken at {dump['now']:g}"
        assert [g["gang_id"] for g in dump["backlog"]["default"]] == [gang_id]
        plane.loop._decide = decide
        assert (await plane.wait(gang_id, timeout=5)).state is S.SUCCEEDED
        await plane.shutdown()

    run(scenario)


def test_no_cycle_within_the_timeout_is_a_clear_error():
    async def scenario():
        plane = await stepped_plane(make_cluster("n0: GPU=2 CPU=4"))  # its loop never cycles
        with pytest.raises(TimeoutError, match="no scheduling cycle ran within 0.5 s"):
            await plane.debug_cycle(timeout_s=0.5)
        assert plane.loop._dumps.requests == []  # the request is gone with its caller
        await plane.shutdown()

    run(scenario)


def test_a_loop_that_explains_nothing_writes_no_reason_and_works_none_out(monkeypatch):
    """A replay's loop (`explains` off): its records get no reason, and its plans work
    none out (core.plan.Waitings); the same cycle explains with it on."""
    worked = []
    monkeypatch.setattr(Reasons, "explain",
                        lambda self, eager, real=Reasons.explain: worked.append(1)
                        or real(self, eager))

    async def scenario():
        plane = await stepped_plane(make_cluster("n0: GPU=2 CPU=4"))
        await submit(plane, "first", "2xGPU=1")
        gang_id = await submit(plane, "second", "2xGPU=1")  # waits for the first
        plane.loop.explains = False
        plane.loop.cycle()
        assert plane.record(gang_id).wait.message is None and worked == []
        plane.loop.explains = True
        plane.loop.cycle()
        assert "GPU" in plane.record(gang_id).wait.message and worked == [1]
        await plane.shutdown()

    run(scenario)
