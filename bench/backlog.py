"""What a backlog costs: the scheduler with thousands of gangs waiting in a queue.

    python bench/backlog.py                    # 100 / 1,000 / 10,000 waiting
    python bench/backlog.py --levels 100,3000  # other levels
    python bench/backlog.py --quick            # 50 / 400 (for tests)

A local cluster of a head (2 CPUs) and 2 workers of 4 CPUs and 4 GPUs each, the scheduler
with its default (GCS) store. Queue `backlog` is limited to one GPU: of its 1-GPU gangs one
runs and the rest wait, LIMIT at the head, BEHIND it the others. At each level (that many
gangs waiting):

- submissions/s: 100 more `@gang_task` `.remote()` calls into `backlog`, one after the
  other from one driver (each returns once the submission is stored);
- `list_gangs()`: every gang's status (grows with the backlog by nature: for reference);
- fresh gang: a 0.5-CPU gang submitted to another queue, submit -> RUNNING (`ready()`),
  and of that, submit -> ADMITTED (the decision; the rest is Ray starting an actor);
- page of 100: `GET /v1/gangs?limit=100` on the REST app (in process, auth off).

Medians of a few (after a warm-up); each row also as a ratio to the first row. Filling
the backlog between levels goes straight to the actor, 100 submissions in flight.
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
from ray.cluster_utils import Cluster  # noqa: E402

import raygang  # noqa: E402
from raygang import demo  # noqa: E402
from raygang.control.program import RoleProgram  # noqa: E402
from raygang.core.spec import gang_spec  # noqa: E402

CONFIG = raygang.SchedulerConfig(queues=[
    raygang.QueueSpec(name="default"),
    raygang.QueueSpec(name="backlog", limit={"GPU": 1}),
    raygang.QueueSpec(name="fresh"),
])
PROGRAM = {"w": RoleProgram(target="raygang.demo:sleep", kwargs={"seconds": 3600.0})}
WAITING = raygang.gang_task(demo.sleep, name="waiting", num_gpus=1, queue="backlog")
FRESH = raygang.gang_task(demo.sleep, name="fresh", num_cpus=0.5, queue="fresh")
TARGET_RATIO = 1.5
SUBMISSIONS = 100


def spec(i: int):
    return gang_spec(f"gang {i}", name=f"b{i}", queue="backlog",
                     roles=[{"name": "w", "resources": {"GPU": 1}}])


def fill(handle, start: int, count: int) -> None:
    """`count` more waiting gangs, 100 submissions in flight, straight to the actor."""

    async def go() -> None:
        sem = asyncio.Semaphore(100)

        async def one(i: int) -> None:
            async with sem:
                await handle.submit.remote(spec(i), PROGRAM, f"fill:{i}")

        await asyncio.gather(*(one(start + i) for i in range(count)))

    asyncio.run(go())


def settle(handle, expected: int, timeout: float = 900.0) -> None:
    """Until the scheduler has decided on every waiting gang (the newest has its place)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        page, _ = ray.get(handle.gang_page.remote(raygang.GangState.PENDING, ["backlog"],
                                                  0, 1, True))
        if page and (page[0].queue_position or 0) >= expected:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the backlog did not settle at {expected} waiting")


def timed(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def submissions_per_s() -> float:
    t = time.perf_counter()
    for _ in range(SUBMISSIONS):
        WAITING.remote(3600.0)
    return SUBMISSIONS / (time.perf_counter() - t)


def fresh_latency(admitted: list[float]) -> float:
    """Submit -> RUNNING (the result); submit -> ADMITTED is appended to `admitted`."""
    t = time.perf_counter()
    ref = FRESH.remote(0.0)
    ref.ready(timeout=120)
    seconds = time.perf_counter() - t
    events = ref.wait(timeout=120).events
    decided = next(e.at for e in events if e.to_state is raygang.GangState.ADMITTED)
    admitted.append(decided - events[0].at)
    return seconds


def page_of_100(app) -> None:
    import httpx

    async def get() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://api") as client:
            response = await client.get("/v1/gangs", params={"limit": 100})
        assert response.status_code == 200 and len(response.json()["items"]) == 100

    asyncio.run(get())


def measure(http) -> dict[str, float]:
    admitted: list[float] = []
    row = {
        "submit": submissions_per_s(),
        "list": timed(raygang.list_gangs, 3),
        "fresh": timed(lambda: fresh_latency(admitted), 7),
        "page": timed(lambda: page_of_100(http), 5),
    }
    row["admit"] = statistics.median(admitted)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levels", default="100,1000,10000")
    parser.add_argument("--quick", action="store_true", help="50 and 400 waiting (tests)")
    args = parser.parse_args(argv)
    levels = [50, 400] if args.quick else [int(x) for x in args.levels.split(",")]

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # Cluster() nodes start without it
    cluster = Cluster(initialize_head=True,
                      head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": False})
    for _ in range(2):
        cluster.add_node(num_cpus=4, num_gpus=4)
    ray.init(address=cluster.address, logging_level="ERROR")
    try:
        return run(levels)
    finally:
        ray.shutdown()
        cluster.shutdown()


def run(levels: list[int]) -> int:
    from raygang.server import create_app
    from raygang.server.auth import AuthConfig

    handle = raygang.start(CONFIG)
    app = create_app(auth=AuthConfig.disabled())
    print(f"backlog: head + 2 x (4 CPU, 4 GPU); queue 'backlog' limited to 1 GPU (one gang "
          f"runs, the rest wait); {SUBMISSIONS} submissions from one driver per level")
    print(f"{'waiting':>8} {'submit/s':>9} {'ratio':>6} {'list_gangs':>11} {'ratio':>6} "
          f"{'fresh->RUNNING':>15} {'ratio':>6} {'(->ADMITTED)':>13} {'page of 100':>12} "
          f"{'ratio':>6}")
    # Warm up (worker processes, imports, the store): the first row is the baseline.
    for _ in range(3):
        fresh_latency([])
    rows, submitted = [], 0
    for level in levels:
        if level + 1 > submitted:  # one gang of the backlog runs, `level` wait
            fill(handle, submitted, level + 1 - submitted)
            submitted = level + 1
        settle(handle, level)
        row = measure(app)
        submitted += SUBMISSIONS
        rows.append((level, row))
        base = rows[0][1]
        print(f"{level:>8,} {row['submit']:>9.1f} {row['submit'] / base['submit']:>5.2f}x "
              f"{row['list'] * 1e3:>9.1f}ms {row['list'] / base['list']:>5.2f}x "
              f"{row['fresh']:>14.3f}s {row['fresh'] / base['fresh']:>5.2f}x "
              f"{row['admit'] * 1e3:>11.1f}ms "
              f"{row['page'] * 1e3:>10.1f}ms {row['page'] / base['page']:>5.2f}x")
    level, last = rows[-1]
    base = rows[0][1]
    ok = (base["submit"] / last["submit"] <= TARGET_RATIO
          and last["fresh"] / base["fresh"] <= TARGET_RATIO
          and last["page"] / base["page"] <= TARGET_RATIO)
    print(f"target at {level:,} waiting: submissions/s and fresh latency within "
          f"{TARGET_RATIO}x of the {rows[0][0]} row, a page of 100 as fast (within "
          f"{TARGET_RATIO}x): {'met' if ok else 'NOT met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
