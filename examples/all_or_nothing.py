"""Two jobs of 3 GPUs each on 4 GPUs: raw Ray actors deadlock, raygang gangs do not.

Started one actor at a time, as two independent drivers would, each job grabs 2 GPUs and
waits forever for its third. As gangs, one job gets all 3 GPUs at once while the other
waits holding nothing, then runs when the first ends.

    python examples/all_or_nothing.py
"""

from __future__ import annotations

import sys
import time

import ray
from ray.util.placement_group import placement_group_table

import raygang
from local_cluster import connect

SECONDS = 1.0


@ray.remote(num_gpus=1, num_cpus=0)
class RawWorker:
    def ready(self):
        return True


def raw_ray(wait: float = 5.0) -> dict:
    # Two drivers taking turns, each starting its next worker once the last one is up.
    # (Ray does not schedule actors in creation order, so firing all six at once would
    # sometimes let one job win by luck; taking turns is the common, deterministic case.)
    jobs = {"A": [], "B": []}
    for turn in range(3):
        for job in jobs:
            worker = RawWorker.remote()
            jobs[job].append(worker)
            if turn < 2:
                ray.get(worker.ready.remote())
    up = {}
    for job, actors in jobs.items():
        ready, _ = ray.wait([a.ready.remote() for a in actors], num_returns=3, timeout=wait / 2)
        up[job] = len(ready)
    free = ray.available_resources().get("GPU", 0)
    print(f"raw Ray after {wait:g}s: job A has {up['A']}/3 members, job B {up['B']}/3, "
          f"{free:g} GPUs free -> {'DEADLOCK' if max(up.values()) < 3 else 'ok'}")
    for actors in jobs.values():
        for actor in actors:
            ray.kill(actor)
    return up


@raygang.gang_task(replicas=3, num_gpus=1, num_cpus=0)
def train(seconds: float) -> tuple[float, float]:
    started = time.time()
    time.sleep(seconds)
    return started, time.time()


def with_raygang() -> dict:
    a = train.options(name="job-a").remote(SECONDS)
    b = train.options(name="job-b").remote(SECONDS)
    first, second = (a, b)
    while True:  # look while one of them runs
        states = {r: r.status() for r in (a, b)}
        running = [r for r, s in states.items() if s.state is raygang.GangState.RUNNING]
        if running:
            first = running[0]
            second = b if first is a else a
            break
        time.sleep(0.02)
    waiting = second.status()
    held = [pg["name"] for pg in placement_group_table().values()
            if pg["name"] == f"raygang-{second.gang_id}" and pg["state"] != "REMOVED"]
    free = ray.available_resources().get("GPU", 0)
    expected_free = ray.cluster_resources().get("GPU", 0) - 3
    print(f"raygang: {first.gang_id} RUNNING with 3 GPUs; {second.gang_id} "
          f"{waiting.state.value}, holding {held or 'nothing'}: {waiting.reason}")
    print(f"         free GPUs now: {free:g}")
    spans = {r.gang_id: r.result(timeout=120) for r in (first, second)}
    end_first = max(e for _, e in spans[first.gang_id])
    start_second = min(s for s, _ in spans[second.gang_id])
    seen = {
        f"{second.gang_id} PENDING while {first.gang_id} ran": waiting.state.value == "PENDING",
        f"{second.gang_id} held no placement group": not held,
        f"free GPUs {free:g} == {expected_free:g} (all but the 3 of {first.gang_id})":
            free == expected_free,
        f"{second.gang_id} started after {first.gang_id} ended": start_second >= end_first,
    }
    ok = all(seen.values())
    if ok:
        print(f"         {second.gang_id} started {start_second - end_first:.2f}s after "
              f"{first.gang_id} ended: never both, never half")
    else:
        print("         NOT all-or-nothing: " + "; ".join(
            f"{what}: {'yes' if true else 'NO'}" for what, true in seen.items()))
    return {"first": first, "second": second, "waiting": waiting, "spans": spans, "ok": ok}


def main() -> dict:
    connect()
    up = raw_ray()
    raygang.start()
    out = with_raygang()
    raygang.shutdown()
    return {"raw": up, **out}


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
