"""What durability costs, and how long a restarted scheduler takes to be ready again.

    python bench/recovery.py            # 1,000 gangs in the store, 100 of them running
    python bench/recovery.py --quick    # 200 gangs, 20 running (for tests)

1. Write cost: N submissions (1 member each, to a queue whose limit lets one run)
   through the scheduler actor, 50 in flight, with the default store (Ray's GCS key-value
   store) and, side by side in the same run and cluster, with the in-memory store (nothing
   durable), alternating ABBA; submissions/s and the ratio durable / memory.
2. Recovery: with the gcs store, N gangs known to the scheduler, R of them running (one
   member each, num_cpus=0, so they fit on a 2-CPU machine) and the rest pending behind a
   queue limit. The scheduler actor is killed (its process dies; Ray restarts it); timed
   from the kill to (a) the restarted actor answering ping and (b) ping saying ready
   (state read back, running gangs adopted), and checked: every gang still known, every
   running gang adopted (same member actors), none requeued.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import ray  # noqa: E402

import raygang  # noqa: E402
from raygang.core.spec import gang_spec  # noqa: E402
from raygang.runtime.launcher import NAMESPACE  # noqa: E402
from raygang.control.program import RoleProgram  # noqa: E402
from raygang.runtime.launcher import SCHEDULER_NAME  # noqa: E402

IN_FLIGHT = 50


def config(store: str, running: int) -> raygang.SchedulerConfig:
    return raygang.SchedulerConfig.model_validate({
        "queues": [{"name": "default"},
                   # `running` members of 1 CPU-less bundle each run; the rest wait.
                   {"name": "held", "limit": {"bench": float(running)}}],
        "state": {"store": store},
    })


def spec(i: int, queue: str):
    return gang_spec(f"gang {i}", name=f"g{i}", queue=queue,
                     roles=[{"name": "w", "replicas": 1,
                             "resources": {"CPU": 0.0, "bench": 1.0}}])


PROGRAM = {"w": RoleProgram(target="raygang.demo:sleep", kwargs={"seconds": 3600.0})}


def submit_many(handle, n: int, queue: str, start: int) -> float:
    """Submissions/s for n submissions, IN_FLIGHT at a time, straight to the actor."""

    async def go() -> None:
        sem = asyncio.Semaphore(IN_FLIGHT)

        async def one(i: int) -> None:
            async with sem:
                await handle.submit.remote(spec(i, queue), PROGRAM, f"bench:{i}")

        await asyncio.gather(*(one(start + i) for i in range(n)))

    t = time.perf_counter()
    asyncio.run(go())
    return n / (time.perf_counter() - t)


def fresh_scheduler(cfg: raygang.SchedulerConfig):
    raygang.shutdown()
    return raygang.start(cfg)


def write_cost(n: int, running: int) -> tuple[dict[str, list[float]], float]:
    rates: dict[str, list[float]] = {"gcs": [], "memory": []}
    for store in ("gcs", "memory", "memory", "gcs"):  # ABBA
        handle = fresh_scheduler(config(store, 1))  # one runs, the rest wait for the limit
        rates[store].append(submit_many(handle, n, "held", 0))
    ratio = statistics.median(rates["gcs"]) / statistics.median(rates["memory"])
    return rates, ratio


def recovery(n: int, running: int) -> dict:
    handle = fresh_scheduler(config("gcs", running))
    submit_many(handle, n, "held", 0)
    deadline = time.monotonic() + 600
    while True:
        gangs = ray.get(handle.list_gangs.remote())
        up = [g for g in gangs if g.state.value == "RUNNING"]
        if len(up) == running:
            break
        assert time.monotonic() < deadline, f"{len(up)}/{running} running"
        time.sleep(1.0)
    before = {g.gang_id: [m.actor_name for m in g.members] for g in up}
    old = ray.get(handle.ping.remote())["instance"]
    t0 = time.perf_counter()
    ray.kill(handle, no_restart=False)
    answered = None
    while True:
        try:
            ping = ray.get(ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE).ping.remote(),
                           timeout=5)
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ValueError):
            time.sleep(0.01)
            continue
        if ping["instance"] == old:  # the kill is asynchronous: the old process answered
            time.sleep(0.01)
            continue
        answered = answered or time.perf_counter() - t0
        if ping["ready"]:
            break
        time.sleep(0.01)
    ready = time.perf_counter() - t0
    # The public API (which retries a call that meets the restart in flight).
    after = {g.gang_id: g for g in raygang.list_gangs()}
    assert set(after) >= {g.gang_id for g in gangs}, "a gang was lost"
    assert all(after[g].state.value == "RUNNING" for g in before), "a running gang stopped"
    return {"answered": answered, "ready": ready, "recovery": ping["recovery"],
            "known": len(after)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for tests")
    args = parser.parse_args(argv)
    n, running = (200, 20) if args.quick else (1000, 100)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, resources={"bench": float(running)}, include_dashboard=False)
    try:
        rates, ratio = write_cost(n, running)
        print(f"recovery: {n} gangs, {running} running; {IN_FLIGHT} submissions in flight; "
              f"runs ABBA")
        for store, values in rates.items():
            print(f"  submit with store {store:6}  " + "  ".join(f"{v:7.1f}/s" for v in values)
                  + f"   median {statistics.median(values):7.1f}/s")
        print(f"  durable / memory: {ratio:.2f}x (the cost of writing each submission to the "
              f"GCS before acknowledging it)")
        result = recovery(n, running)
        found = result["recovery"]
        print(f"  kill -> restarted actor answers: {result['answered']:.2f} s; -> ready "
              f"(state read back, {found['adopted']} running gangs adopted): "
              f"{result['ready']:.2f} s (rebuild itself {found['seconds']:.2f} s)")
        print(f"  after the restart: {result['known']} gangs known, {found['pending']} pending, "
              f"{found['adopted']} adopted, {found['requeued']} requeued, "
              f"{found['orphans_removed']} orphans removed")
    finally:
        raygang.shutdown()
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
