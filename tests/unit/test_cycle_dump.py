"""A cycle's inputs written as JSON and read back decide the same plan (core.cycle_dump),
and a file that is not a dump this raygang reads says which field is wrong.

The random cycles are those of test_schedule_properties (random clusters and gangs), with
running gangs (some preemptible, some leaving, some protected by a minimum runtime), team
queues with quotas and limits, and random policies: allocate, reclaim and preempt all
decide something, and gangs wait for every reason.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from raygang.core import PendingGang, PolicyConfig, QueueSpec, Resources, schedule
from raygang.core.backlog import Backlog
from raygang.core.cycle_dump import FORMAT, CycleDumpError, dump_cycle, load_cycle
from raygang.core.plan_data import first_difference, plan_data
from raygang.core.snapshot import ClusterSnapshot, Elastic, NodeState, PlacedGang
from raygang.core.spec import Strategy

from tests.unit.builders import cluster, gang, running, spec
from tests.unit.test_schedule_properties import random_cluster, random_gangs

ROOT = Path(__file__).resolve().parents[2]
QUEUES = ["default", "a", "b"]


def random_cycle(seed: int):
    """(snapshot, backlog, config, now) of one random cycle."""
    rng = random.Random(seed)
    nodes, placed = [], []
    for node in random_cluster(rng).nodes:  # most GPUs of a node held by a running gang
        gpus = int(node.total.get("GPU"))
        if node.alive and gpus and rng.random() < 0.7:
            held = rng.randint(1, gpus)
            placed.append(PlacedGang(
                f"r-{len(placed)}", rng.choice([10, 100, 1000]),
                ((node.node_id, Resources(GPU=1)),) * held, queue=rng.choice(QUEUES),
                preemptible=rng.random() < 0.8,
                running_since=rng.choice([None, 0.0, float(seed) - 5]),
                min_runtime_s=rng.choice([0.0, 0.0, 10.0]), draining=rng.random() < 0.1,
                checkpoint_s=rng.choice([None, 30.0])))
            node = NodeState(node.node_id, node.total, Resources.signed(
                {**node.free, "GPU": gpus - held - rng.choice([0, 0, 1])}), node.labels,
                node.alive, node.name)
        nodes.append(node)
    snapshot = ClusterSnapshot(tuple(nodes), tuple(placed))
    pending = [PendingGang(g.gang_id, g.spec.model_copy(update={"queue": rng.choice(QUEUES)}),
                           g.priority, g.seq, rng.random() < 0.8,
                           rng.choice([None, 0.0, float(seed) - 100]))
               for g in random_gangs(rng)]
    # Small gangs of queue a, within its quota: they may reclaim from the other queues.
    pending += [PendingGang(f"a-{i}", spec(f"a-{i}", rng.choice(["GPU=1", "2xGPU=1"]),
                                           queue="a"), rng.choice([10, 100]), 10 + i)
                for i in range(rng.randint(0, 2))]
    config = PolicyConfig(
        backfill=rng.random() < 0.3,
        queues=[QueueSpec(name="default"), QueueSpec(name="a", quota={"GPU": 2}),
                QueueSpec(name="b", limit={"GPU": rng.choice([1, 2, 4])})],
        preemption={"reclaim_min_runtime_s": rng.choice([0, 0, 900]),
                    "reclaim_delay_s": rng.choice([0, 300]),
                    "reclaim_trade_ratio": rng.choice([None, 0.5])},
        sla_waiting_time_s=rng.choice([None, 50.0]),
        backfill_lookahead=rng.choice([0, 0, 1, 4, None]),
        sla_max_holds=rng.choice([1, 1, 3]))  # drawn last: the scenarios stay as they were
    return snapshot, Backlog.of(pending), config, float(seed)


def through_json(data: dict) -> str:
    return json.dumps(data)


@pytest.mark.parametrize("seeds", [range(0, 60), range(60, 120)])
def test_a_dumped_cycle_loads_back_to_its_inputs_and_replays_to_its_plan(seeds):
    for seed in seeds:
        snapshot, backlog, config, now = random_cycle(seed)
        plan = schedule(snapshot, backlog, config, now)
        loaded = load_cycle(through_json(dump_cycle(snapshot, backlog, config, now, plan)))
        assert loaded.cluster_snapshot() == snapshot, seed
        assert loaded.pending().lines == backlog.lines, seed
        assert loaded.pending().totals == backlog.totals, seed
        assert loaded.config == config and loaded.now == now, seed
        replayed = loaded.replay()
        assert loaded.difference(replayed) is None, seed
        assert replayed == plan, seed


def test_the_random_cycles_decide_every_kind_of_thing():
    """Guard against a generator whose cycles decide nothing much."""
    actions, codes = set(), set()
    for seed in range(120):
        data = plan_data(schedule(*random_cycle(seed)))
        actions |= {a["action"] for a in data["admissions"]}
        actions |= {p["action"] for p in data["preemptions"]}
        codes |= {w["code"] for w in data["waiting"].values()}
    assert {"allocate", "preempt", "reclaim"} <= actions
    assert codes == {"NO_FIT", "BEHIND", "LIMIT", "UNSCHEDULABLE"}


def test_plan_data_reads_the_reasons_and_places_behind_a_blocked_head_as_asked_for():
    for seed in range(0, 120, 3):
        snapshot, backlog, config, now = random_cycle(seed)
        lazy = schedule(snapshot, backlog, config, now)
        full = schedule(snapshot, [g for line in backlog.lines.values() for g in line],
                        config, now)
        assert plan_data(lazy) == plan_data(full), seed
        # ... and as the plan's own mappings answer for one gang at a time.
        data = plan_data(lazy)
        assert data["positions"] == {g: lazy.positions[g] for g in lazy.positions}, seed
        assert data["waiting"] == {g: {"code": w.code.value, "message": w.message,
                                       "behind": w.behind}
                                   for g, w in ((g, lazy.waiting[g]) for g in lazy.waiting)}


def test_what_a_snapshot_holds_survives_the_file():
    """Every field of the snapshot: negative free (booked beyond the total), labels, dead
    nodes, elastic gangs with members leaving and missing, a surplus member's `of`."""
    node = NodeState("n-1", Resources(GPU=4, CPU=8), Resources.signed({"GPU": -2, "CPU": 0.5}),
                     {"zone": "a"}, alive=False, name="w-1")
    elastic = Elastic(Strategy.SPREAD, surplus=("r0-2",), leaving=("r0-3",),
                      missing=(("r0-4", Resources(GPU=1)),), within=("n-1",))
    placed = (PlacedGang("e", 100, (("n-1", Resources(GPU=1)),) * 4, queue="a",
                         running_since=3.5, elastic=elastic, checkpoint_s=60.0),
              PlacedGang("e/r0-2", 100, (("n-1", Resources(GPU=1)),), of="e", draining=True))
    snapshot = ClusterSnapshot((node,), placed)
    empty = Backlog.of([])
    loaded = load_cycle(through_json(dump_cycle(snapshot, empty, PolicyConfig(), 1.25)))
    assert loaded.cluster_snapshot() == snapshot
    assert loaded.cluster_snapshot().nodes[0].free["GPU"] == -2
    assert loaded.plan is None and loaded.error is None


def test_the_replay_is_the_same_in_another_process(tmp_path):
    """String hashing differs between processes (PYTHONHASHSEED): a cycle replayed off
    the scheduler's process must not depend on it."""
    path = tmp_path / "dumps.json"
    seeds = range(0, 120, 4)
    path.write_text(json.dumps([
        dump_cycle(*random_cycle(s), plan=schedule(*random_cycle(s))) for s in seeds]))
    code = ("import json, sys; from raygang.core.cycle_dump import load_cycle; "
            "dumps = [load_cycle(d) for d in json.load(open(sys.argv[1]))]; "
            "print(json.dumps([d.difference(d.replay()) for d in dumps]))")
    for hash_seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, text=True,
                             capture_output=True, timeout=120,
                             env={**os.environ, "PYTHONHASHSEED": hash_seed})
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == [None] * len(seeds)


def _small_dump() -> dict:
    snapshot = cluster("w-1: GPU=4 CPU=8 free GPU=0", "w-2: GPU=4 CPU=8")
    snapshot = ClusterSnapshot(snapshot.nodes, (running("r", "w-1: 4xGPU=1", priority=10),))
    pending = [gang("big", "8xGPU=1", priority=1000), gang("small", "GPU=1")]
    backlog = Backlog.of(pending)
    return dump_cycle(snapshot, backlog, PolicyConfig(), 7.0,
                      schedule(snapshot, backlog, PolicyConfig(), 7.0))


def test_first_difference_names_the_field():
    recorded = _small_dump()["plan"]
    assert first_difference(recorded, json.loads(json.dumps(recorded))) is None
    changed = json.loads(json.dumps(recorded))
    gang_id = next(iter(changed["waiting"]))
    changed["waiting"][gang_id]["message"] = "something else"
    assert first_difference(recorded, changed).startswith(
        f"plan.waiting[{gang_id!r}].message: recorded '")
    changed = json.loads(json.dumps(recorded))
    changed["admissions"].append({"gang_id": "extra"})
    assert first_difference(recorded, changed) == (
        f"plan.admissions: recorded {len(recorded['admissions'])} items, replayed "
        f"{len(recorded['admissions']) + 1} (the first extra: {{'gang_id': 'extra'}})")


@pytest.mark.parametrize("change, message", [
    (lambda d: "[1, 2", "not JSON: Expecting ',' delimiter: line 1 column 6 (char 5)"),
    (lambda d: [d], "expected a JSON object (format, now, config, snapshot, backlog), got list"),
    (lambda d: {k: v for k, v in d.items() if k != "format"},
     "format: missing: not a raygang cycle dump"),
    (lambda d: {**d, "format": "raygang.cycle/0"},
     f"format: 'raygang.cycle/0' is not a format this raygang reads (it reads {FORMAT!r})"),
    (lambda d: {**d, "snapshot": {**d["snapshot"], "nodes": [
        {**d["snapshot"]["nodes"][0], "total": "lots"}] + d["snapshot"]["nodes"][1:]}},
     "snapshot.nodes[0].total: expected a mapping of resource name to amount"),
    (lambda d: {**d, "backlog": {"default": [{**d["backlog"]["default"][0], "seq": "first"}]}},
     "backlog.default[0].seq: Input should be a valid integer"),
    (lambda d: {**d, "now": None}, "now: Input should be a valid number"),
    (lambda d: {**d, "config": {**d["config"], "actions": ["allocate", "steal"]}},
     "config.actions[1]: unknown action 'steal'"),
    (lambda d: {**d, "extra": 1}, "extra: Extra inputs are not permitted"),
])
def test_a_bad_file_says_which_field_and_what_was_expected(change, message):
    data = change(_small_dump())
    with pytest.raises(CycleDumpError) as error:
        load_cycle(data if isinstance(data, str) else json.dumps(data))
    assert str(error.value).startswith(message), str(error.value)
    assert "\n" not in str(error.value)


def test_a_dump_from_before_the_lookahead_replays_with_strict_lines():
    """A dump whose config has no `backfill_lookahead` was written by a raygang that kept
    each queue's line strictly in order: it replays so, whatever today's default."""
    for seed in range(0, 120, 7):
        snapshot, backlog, config, now = random_cycle(seed)
        strict = config.model_copy(update={"backfill_lookahead": 0})
        plan = schedule(snapshot, backlog, strict, now)
        data = json.loads(through_json(dump_cycle(snapshot, backlog, strict, now, plan)))
        del data["config"]["backfill_lookahead"]
        loaded = load_cycle(data)
        assert loaded.config.backfill_lookahead == 0, seed
        assert loaded.difference(loaded.replay()) is None, seed


def test_a_dump_from_before_the_checkpoint_wait_replays_without_it():
    """A dump whose preemption has no `reclaim_checkpoint_ratio` was written by a raygang
    that stopped victims whatever they had saved: it replays so, though today's default
    waits for a victim's checkpoint (with or without the trade ratio, also missing in
    dumps older still)."""
    for seed in range(0, 120, 11):
        snapshot, backlog, config, now = random_cycle(seed)
        plan = schedule(snapshot, backlog, config.model_copy(update={
            "preemption": config.preemption.model_copy(
                update={"reclaim_checkpoint_ratio": None})}), now)
        data = json.loads(through_json(dump_cycle(snapshot, backlog, config, now, plan)))
        del data["config"]["preemption"]["reclaim_checkpoint_ratio"]
        if seed % 2:
            del data["config"]["preemption"]["reclaim_trade_ratio"]
        loaded = load_cycle(data)
        assert loaded.config.preemption.reclaim_checkpoint_ratio is None, seed
        assert loaded.config.preemption.reclaim_trade_ratio == (
            None if seed % 2 else config.preemption.reclaim_trade_ratio), seed


def test_a_dump_from_before_trades_replays_with_the_fixed_reclaim_rules():
    """A dump whose preemption has no `reclaim_trade_ratio` was written by a raygang that
    reclaimed by the fixed delay and minimum runtime alone: it replays so, though today's
    default trades."""
    for seed in range(0, 120, 7):
        snapshot, backlog, config, now = random_cycle(seed)
        fixed = config.model_copy(update={"preemption": config.preemption.model_copy(
            update={"reclaim_trade_ratio": None})})
        plan = schedule(snapshot, backlog, fixed, now)
        data = json.loads(through_json(dump_cycle(snapshot, backlog, fixed, now, plan)))
        del data["config"]["preemption"]["reclaim_trade_ratio"]
        loaded = load_cycle(data)
        assert loaded.config.preemption.reclaim_trade_ratio is None, seed
        assert loaded.difference(loaded.replay()) is None, seed
