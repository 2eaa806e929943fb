"""A cycle dumped from the running scheduler actor replays, in this process, to the plan
the scheduler made (issue 29: "a cycle dumped from a running scheduler replays to the same
plan"). The `load` queue admits one GPU at a time: one tiny gang holds it, two wait (the
first for the limit, the second set aside as the first, whose shape it has) when the dump
is asked for."""

from __future__ import annotations

import json

import raygang
from raygang import GangState
from raygang.core.cycle_dump import load_cycle
from tests.integration.helpers import wait_state, wait_until


@raygang.gang_task(replicas=1, num_gpus=1, num_cpus=0, queue="load")
class Hold:
    pass


def test_a_cycle_dumped_from_the_running_scheduler_replays_to_its_plan(ray_cluster):
    holder = Hold.options(name="replay-holder").remote()
    waiting = [Hold.options(name=f"replay-waiting-{i}").remote() for i in range(2)]
    try:
        wait_state(holder, GangState.RUNNING)
        wait_until(lambda: "waiting as gang" in (waiting[1].status().reason or ""))
        dump = raygang.debug_cycle()
        loaded = load_cycle(json.dumps(dump))
        assert loaded.error is None and loaded.plan is not None
        assert loaded.difference(loaded.replay()) is None
        # What the scheduler saw: the holder on a GPU node, the two in line in `load`.
        held = {g.gang_id: g for g in loaded.snapshot.placed}
        assert held[holder.gang_id].queue == "load"
        assert [g.gang_id for g in loaded.backlog["load"]] == [w.gang_id for w in waiting]
        reasons = loaded.plan["waiting"]
        assert reasons[waiting[0].gang_id]["code"] == "LIMIT"
        assert reasons[waiting[1].gang_id] == {
            "code": "LIMIT", "behind": waiting[0].gang_id,
            "message": waiting[1].status().reason}
        # The replay reads its inputs: without the limit, both go (8 GPUs, 1 held).
        dump["config"]["queues"] = [dict(q, limit=None) if q["name"] == "load" else q
                                    for q in dump["config"]["queues"]]
        wider = load_cycle(json.dumps(dump))
        assert [a.gang_id for a in wider.replay().admissions] == [w.gang_id for w in waiting]
    finally:
        for ref in (*waiting, holder):
            ref.cancel()
