"""What durability costs, and how long a restarted scheduler takes to be ready again.

    python bench/recovery.py            # 1,000 gangs in the store, 100 of them running
    python bench/recovery.py --quick    # 100 gangs, 5 running, each store once (for tests)
    python bench/recovery.py --address HOST:PORT   # an existing cluster: its scheduler is
        # replaced while the bench runs (its unfinished gangs cancelled, its history cleared)
        # and started again with its config at the end; the members take 1/8 CPU each there
        # instead of the `bench` resource of the bench's own cluster

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
from raygang.control.program import RoleProgram  # noqa: E402
from raygang.runtime.names import NAMESPACE, SCHEDULER_NAME  # noqa: E402

IN_FLIGHT = 50


# What one member takes: 1 `bench` (a resource of the bench's own cluster, so that the
# members need no CPU of a 2-CPU machine), or 1/8 CPU on a joined cluster.
MEMBER = {"CPU": 0.0, "bench": 1.0}
JOINED_MEMBER = {"CPU": 0.125}


def config(store: str, running: int, member: dict[str, float]) -> raygang.SchedulerConfig:
    return raygang.SchedulerConfig.model_validate({
        "queues": [{"name": "default"},
                   # `running` members run; the rest wait.
                   {"name": "held", "limit": {k: v * running for k, v in member.items() if v}}],
        "state": {"store": store},
    })


def spec(i: int, queue: str, member: dict[str, float]):
    return gang_spec(f"gang {i}", name=f"g{i}", queue=queue,
                     roles=[{"name": "w", "replicas": 1, "resources": member}])


PROGRAM = {"w": RoleProgram(target="raygang.demo:sleep", kwargs={"seconds": 3600.0})}


def submit_many(handle, n: int, queue: str, start: int, member: dict[str, float]) -> float:
    """Submissions/s for n submissions, IN_FLIGHT at a time, straight to the actor."""

    async def go() -> None:
        sem = asyncio.Semaphore(IN_FLIGHT)

        async def one(i: int) -> None:
            async with sem:
                await handle.submit.remote(spec(i, queue, member), PROGRAM, f"bench:{i}")

        await asyncio.gather(*(one(start + i) for i in range(n)))

    t = time.perf_counter()
    asyncio.run(go())
    return n / (time.perf_counter() - t)


def fresh_scheduler(cfg: raygang.SchedulerConfig):
    raygang.shutdown()
    return raygang.start(cfg)


def write_cost(n: int, member: dict[str, float],
               order: tuple[str, ...]) -> tuple[dict[str, list[float]], float]:
    rates: dict[str, list[float]] = {"gcs": [], "memory": []}
    for store in order:
        handle = fresh_scheduler(config(store, 1, member))  # one runs, the rest wait
        rates[store].append(submit_many(handle, n, "held", 0, member))
    ratio = statistics.median(rates["gcs"]) / statistics.median(rates["memory"])
    return rates, ratio


def recovery(n: int, running: int, member: dict[str, float]) -> dict:
    handle = fresh_scheduler(config("gcs", running, member))
    submit_many(handle, n, "held", 0, member)
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
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, each store once, for tests")
    parser.add_argument("--address", help="an existing cluster instead of a new one")
    args = parser.parse_args(argv)
    n, running = (100, 5) if args.quick else (1000, 100)
    order = ("gcs", "memory") if args.quick else ("gcs", "memory", "memory", "gcs")  # ABBA
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    joined = None  # the joined cluster's scheduler config, started again at the end
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
        joined = ray.get(raygang.start().ping.remote())["config"]
        member = JOINED_MEMBER
    else:  # address="local": always a new cluster, never one a stale /tmp/ray file points to
        ray.init(address="local", num_cpus=2, resources={"bench": float(running)},
                 include_dashboard=False)
        member = MEMBER
    try:
        rates, ratio = write_cost(n, member, order)
        runs = "ABBA" if len(order) == 4 else "once each"
        print(f"recovery: {n} gangs, {running} running; {IN_FLIGHT} submissions in flight; "
              f"runs {runs}")
        for store, values in rates.items():
            print(f"  submit with store {store:6}  " + "  ".join(f"{v:7.1f}/s" for v in values)
                  + f"   median {statistics.median(values):7.1f}/s")
        print(f"  durable / memory: {ratio:.2f}x (the cost of writing each submission to the "
              f"GCS before acknowledging it)")
        result = recovery(n, running, member)
        found = result["recovery"]
        print(f"  kill -> restarted actor answers: {result['answered']:.2f} s; -> ready "
              f"(state read back, {found['adopted']} running gangs adopted): "
              f"{result['ready']:.2f} s (rebuild itself {found['seconds']:.2f} s)")
        print(f"  after the restart: {result['known']} gangs known, {found['pending']} pending, "
              f"{found['adopted']} adopted, {found['requeued']} requeued, "
              f"{found['orphans_removed']} orphans removed")
    finally:
        raygang.shutdown()
        if joined is not None:
            raygang.start(raygang.SchedulerConfig.model_validate(joined))
        ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
