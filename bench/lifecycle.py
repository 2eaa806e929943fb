"""Gang lifecycle throughput: raygang vs a raw Ray script doing the same, same cluster, same run.

For each gang size (1, 2, 4 members; each member 1 virtual GPU, trivial work), N gangs go
through the whole lifecycle: reserve a placement group, start the members, one call each,
collect, kill, remove. Both sides submit all N at once and let the cluster run as many as
fit (8 GPUs), so both get the same concurrency:

- raw: asyncio in the driver; one placement group per gang (Ray queues the ones that do
  not fit), actors into its bundles, one `.remote()` each, `ray.kill`, remove the group.
- raygang: `@gang_task(...).remote()` N times, then `.result()` of each.

Runs alternate raw, raygang, raygang, raw (ABBA) after a warm-up so that neither side
profits from a warmer worker pool. Prints gangs/s of each and the ratio raygang/raw.

    python bench/lifecycle.py            # N=16 per size, ~3 minutes here
    python bench/lifecycle.py --quick    # N=2, sizes 1 and 2, raw then raygang once, no
                                         # warm-up: every figure, for tests
    python bench/lifecycle.py --address HOST:PORT   # an existing cluster (8 GPUs or more)
                                         # and its scheduler (left running), not a new one
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

import raygang

GPUS = 8


@ray.remote(num_gpus=1, num_cpus=0)
class RawMember:
    def work(self, rank: int) -> int:
        return rank


async def _raw_gang(size: int) -> list[int]:
    pg = placement_group([{"GPU": 1}] * size, strategy="PACK")
    await pg.ready()
    members = [
        RawMember.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
            pg, placement_group_bundle_index=i)).remote()
        for i in range(size)
    ]
    try:
        return await asyncio.gather(*(m.work.remote(i) for i, m in enumerate(members)))
    finally:
        for m in members:
            ray.kill(m)
        remove_placement_group(pg)


def run_raw(size: int, n: int) -> float:
    async def all_gangs():
        return await asyncio.gather(*(_raw_gang(size) for _ in range(n)))

    started = time.perf_counter()
    results = asyncio.run(all_gangs())
    elapsed = time.perf_counter() - started
    assert all(r == list(range(size)) for r in results)
    return elapsed


@raygang.gang_task(num_gpus=1, num_cpus=0, strategy="PACK")
def work() -> int:
    return raygang.get_context().rank


def run_raygang(size: int, n: int) -> float:
    task = work.options(replicas=size)
    started = time.perf_counter()
    refs = [task.remote() for _ in range(n)]
    results = [ref.result(timeout=600) for ref in refs]
    elapsed = time.perf_counter() - started
    assert all(r == list(range(size)) for r in results)
    return elapsed


def wait_idle(timeout: float = 30) -> None:
    deadline = time.time() + timeout
    while ray.available_resources().get("GPU", 0) < GPUS and time.time() < deadline:
        time.sleep(0.05)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--gangs", type=int, default=16, help="gangs per size and run")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--quick", action="store_true",
                        help="2 gangs, sizes 1 and 2, raw then raygang once, no warm-up")
    parser.add_argument("--address", help="an existing cluster (8 GPUs or more) instead of a "
                        "new one")
    args = parser.parse_args()
    order = ("raw", "raygang") if args.quick else ("raw", "raygang", "raygang", "raw")
    if args.quick:
        args.gangs, args.sizes = 2, [1, 2]

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
    else:  # address="local": always a new cluster, never one a stale /tmp/ray file points to
        ray.init(address="local", num_cpus=4, num_gpus=GPUS, include_dashboard=False,
                 log_to_driver=False)
    raygang.start()
    if not args.quick:
        run_raw(1, 2), run_raygang(1, 2)  # warm-up: worker pool, function exports
    wait_idle()

    runs = "ABBA (raw, raygang, raygang, raw)" if len(order) == 4 else "raw then raygang"
    print(f"lifecycle: {args.gangs} gangs per size and run, each member 1 virtual GPU, "
          f"{GPUS} GPUs, trivial work; runs {runs}")
    print(f"{'members':>7}  {'raw gangs/s':>11}  {'raygang gangs/s':>15}  {'ratio':>6}")
    ratios = []
    for size in args.sizes:
        times = {"raw": 0.0, "raygang": 0.0}
        for side in order:
            runner = run_raw if side == "raw" else run_raygang
            times[side] += runner(size, args.gangs)
            wait_idle()
        per_side = len(order) // 2
        raw_rate = per_side * args.gangs / times["raw"]
        rg_rate = per_side * args.gangs / times["raygang"]
        ratios.append(rg_rate / raw_rate)
        print(f"{size:>7}  {raw_rate:>11.2f}  {rg_rate:>15.2f}  {rg_rate / raw_rate:>5.2f}x")
    verdict = "met" if min(ratios) >= 0.9 else "NOT met"
    print(f"target raygang >= 0.9x raw at every size: {verdict} (lowest {min(ratios):.2f}x)")
    if not args.address:  # a joined cluster keeps its scheduler
        raygang.shutdown()
    ray.shutdown()


if __name__ == "__main__":
    main()
