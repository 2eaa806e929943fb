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
- fresh gang: a 0.5-CPU gang submitted to another queue, from `.remote()` to RUNNING as
  the client sees it (`ready()` returns), and of that, read from the gang's events:
  submit -> ADMITTED (the decision), ADMITTED -> RUNNING (a placement group reserved, the
  member's worker process started, its constructor run) and the rest (the submission
  reaching the scheduler, the answer reaching the client);
- raw: the same Ray work by hand, side by side: a placement group of the fresh gang's
  bundle, then a detached actor in it, until it answers (the floor under the fresh gang);
- page of 100: `GET /v1/gangs?limit=100` on the REST app (in process, auth off).

Most of a fresh gang's time is Ray starting its member's worker process. Ray starts a few
idle workers with the cluster (on the head, where the driver connects), and a member that
finds one starts in about a third of the time; but a member's process ends with it. The
warm-up uses them up, so that every row starts new processes (a first fresh gang is faster
for a reason that has nothing to do with the backlog). The fresh table's last row is the
first level again, once the gangs beyond it are cancelled: how far it is from the first
row is how much the machine drifted within the run.

Medians of a few (after that warm-up); each row also as a ratio to the first row.
Filling the backlog between levels goes straight to the actor, 100 submissions in flight.
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
from ray.util.placement_group import placement_group, remove_placement_group  # noqa: E402
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy  # noqa: E402

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
FRESH_RUNS = 9
WARM_UP = 4  # fresh gangs first: they take Ray's idle workers (see the docstring)


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


def shrink(handle, keep: int) -> None:
    """Cancel the newest waiting gangs until `keep` wait, 100 cancellations in flight."""

    async def go() -> None:
        page, total = await handle.gang_page.remote(raygang.GangState.PENDING, ["backlog"],
                                                    0, 10**9, True)
        sem = asyncio.Semaphore(100)

        async def one(gang_id: str) -> None:
            async with sem:
                await handle.cancel.remote(gang_id, "bench: back to a short backlog")

        await asyncio.gather(*(one(s.gang_id) for s in page[:total - keep]))

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


def fresh_latency(phases: dict[str, list[float]]) -> float:
    """Submit -> RUNNING as the client sees it; of that, from the gang's events (the
    scheduler's clock: the same host's), appended to `phases`: submit -> ADMITTED, and
    ADMITTED -> RUNNING."""
    t, submitted = time.perf_counter(), time.time()
    ref = FRESH.remote(0.0)
    ref.ready(timeout=120)
    seconds = time.perf_counter() - t
    at: dict[raygang.GangState, float] = {}
    for event in ref.wait(timeout=120).events:
        at.setdefault(event.to_state, event.at)
    phases["admit"].append(at[raygang.GangState.ADMITTED] - at[raygang.GangState.PENDING])
    phases["start"].append(at[raygang.GangState.RUNNING] - at[raygang.GangState.ADMITTED])
    phases["rest"].append(seconds - (at[raygang.GangState.RUNNING] - submitted)
                          + (at[raygang.GangState.PENDING] - submitted))
    return seconds


@ray.remote
class Probe:
    def ready(self) -> int:
        return os.getpid()


def raw_start() -> float:
    """The Ray work of a fresh gang, by hand: its placement group, then an actor in it
    (detached, 0.5 CPU, as a member), until the actor answers."""
    t = time.perf_counter()
    pg = placement_group([{"CPU": 0.5}], strategy="PACK")
    ray.get(pg.ready(), timeout=120)
    actor = Probe.options(num_cpus=0.5, lifetime="detached", namespace="raygang-bench",
                          scheduling_strategy=PlacementGroupSchedulingStrategy(pg, 0)).remote()
    ray.get(actor.ready.remote(), timeout=120)
    seconds = time.perf_counter() - t
    ray.kill(actor)
    remove_placement_group(pg)
    return seconds


def page_of_100(app) -> None:
    import httpx

    async def get() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app),
                                     base_url="http://api") as client:
            response = await client.get("/v1/gangs", params={"limit": 100})
        assert response.status_code == 200 and len(response.json()["items"]) == 100

    asyncio.run(get())


def measure_fresh() -> dict[str, float]:
    phases: dict[str, list[float]] = {"admit": [], "start": [], "rest": []}
    fresh, raw = [], []
    for _ in range(FRESH_RUNS):  # side by side: what Ray does at the time, and raygang
        fresh.append(fresh_latency(phases))
        raw.append(raw_start())
    return {"fresh": statistics.median(fresh), "raw": statistics.median(raw),
            **{name: statistics.median(values) for name, values in phases.items()}}


def measure(http) -> dict[str, float]:
    row = measure_fresh()
    # After the fresh gangs: these leave garbage and a longer line behind them.
    row["submit"] = submissions_per_s()
    row["list"] = timed(raygang.list_gangs, 3)
    row["page"] = timed(lambda: page_of_100(http), 5)
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
          f"runs, the rest wait); {SUBMISSIONS} submissions from one driver per level; "
          f"fresh gang and raw: median of {FRESH_RUNS}, side by side")
    # The first row is the baseline: nothing is left warm for it (see the docstring).
    warm = [fresh_latency({"admit": [], "start": [], "rest": []}) for _ in range(WARM_UP)]
    print(f"warm-up, fresh gangs with nothing waiting: "
          f"{', '.join(f'{s:.3f}s' for s in warm)} (the first may find an idle worker)")
    raw_start()
    rows, submitted = [], 0
    for level in levels:
        if level + 1 > submitted:  # one gang of the backlog runs, `level` wait
            fill(handle, submitted, level + 1 - submitted)
            submitted = level + 1
        settle(handle, level)
        rows.append((level, measure(app)))
        submitted += SUBMISSIONS
        print(f"  {level:,} waiting: measured", file=sys.stderr, flush=True)
    again = None
    if levels[-1] > levels[0]:  # the first level once more, in the same run (drift)
        shrink(handle, levels[0])
        settle(handle, levels[0])
        again = (levels[0], measure_fresh())
    report(rows, again)
    return 0


def report(rows: list[tuple[int, dict[str, float]]],
           again: tuple[int, dict[str, float]] | None) -> None:
    base = rows[0][1]

    def ratio(row: dict[str, float], key: str) -> str:
        return f"{row[key] / base[key]:>5.2f}x"

    def fresh_row(level: int, row: dict[str, float], note: str = "") -> None:
        print(f"{level:>8,} {row['fresh']:>14.3f}s {ratio(row, 'fresh')} "
              f"{row['admit'] * 1e3:>10.1f}ms {row['start']:>9.3f}s "
              f"{row['rest'] * 1e3:>5.0f}ms {row['raw']:>12.3f}s {ratio(row, 'raw')}{note}")

    print(f"{'waiting':>8} {'fresh->RUNNING':>15} {'ratio':>6} {'(->ADMITTED':>12} "
          f"{'->RUNNING':>10} {'rest)':>7} {'raw PG+actor':>13} {'ratio':>6}")
    for level, row in rows:
        fresh_row(level, row)
    if again is not None:
        fresh_row(*again, "  (again, the gangs beyond cancelled)")
    print(f"{'waiting':>8} {'submit/s':>9} {'ratio':>6} {'list_gangs':>11} {'ratio':>7} "
          f"{'page of 100':>12} {'ratio':>6}")
    for level, row in rows:
        print(f"{level:>8,} {row['submit']:>9.1f} {ratio(row, 'submit')} "
              f"{row['list'] * 1e3:>9.1f}ms {row['list'] / base['list']:>6.2f}x "
              f"{row['page'] * 1e3:>10.1f}ms {ratio(row, 'page')}")
    level, last = rows[-1]
    ok = (base["submit"] / last["submit"] <= TARGET_RATIO
          and last["fresh"] / base["fresh"] <= TARGET_RATIO
          and last["page"] / base["page"] <= TARGET_RATIO)
    print(f"target at {level:,} waiting: submissions/s and fresh gang's submit -> RUNNING "
          f"within {TARGET_RATIO}x of the {rows[0][0]:,} row, a page of 100 as fast (within "
          f"{TARGET_RATIO}x): {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    sys.exit(main())
