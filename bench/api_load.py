"""REST API throughput and latency: what the HTTP layer costs over calling the scheduler.

A local cluster (8 virtual GPUs) runs the scheduler with a queue `load` limited to 1 GPU:
one gang runs, every other one waits PENDING, so the cluster does nothing but bookkeeping.
The API (`create_app` with a generated admin token) runs under uvicorn in a thread of this
process. `--concurrency` clients (asyncio tasks sharing an httpx.AsyncClient) send:

- submit: `POST /v1/gangs` (1 GPU, `raygang.demo:sleep 600`, priority batch, an
  Idempotency-Key each); baseline: the scheduler actor's `submit(spec, programs, key)`
  with the same specs, the same concurrency, from the same process;
- status: `GET /v1/gangs/{id}` of the gangs just submitted; baseline: the actor's
  `status(id)`.

Each side runs twice with N/2 requests per operation, in ABBA order (REST, direct,
direct, REST); every run starts from an empty queue (the previous run's gangs are
cancelled). `GET /healthz` (no scheduler call) shows the HTTP stack's own floor. Prints
requests/s and p50/p99 latency of each, and the ratio REST/direct of requests/s.

    python bench/api_load.py                  # N=1000, 50 clients, ~1 minute here
    python bench/api_load.py --n 200          # for tests
    python bench/api_load.py --address HOST:PORT   # an existing cluster whose scheduler
                                              # (left running) has the queue `load` as here
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable

import httpx
import ray

import raygang
from raygang.server import AuthConfig, Principal
from raygang.server.auth import digest
from raygang.server.models import GangSubmission
from raygang.server.standalone import serve_in_thread

GPUS = 8
QUEUE = "load"
CONFIG = raygang.SchedulerConfig(queues=[
    raygang.QueueSpec(name="default"),
    raygang.QueueSpec(name=QUEUE, limit={"GPU": 1}),  # one runs, the rest wait
])


def submission(i: int) -> dict:
    return {
        "name": f"bench-{i}",
        "queue": QUEUE,
        "priority": "batch",
        "roles": [{"name": "worker", "replicas": 1, "resources": {"GPU": 1},
                   "entrypoint": "raygang.demo:sleep", "args": [600]}],
    }


async def measure(calls: list[Callable[[], Awaitable]], concurrency: int) -> tuple:
    """Run `calls` with `concurrency` workers; (results, latencies in s, elapsed s)."""
    results: list = [None] * len(calls)
    latencies: list[float] = []
    todo = iter(range(len(calls)))

    async def worker() -> None:
        for i in todo:  # the shared iterator hands out each call once
            started = time.perf_counter()
            results[i] = await calls[i]()
            latencies.append(time.perf_counter() - started)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return results, latencies, time.perf_counter() - started


class Rest:
    def __init__(self, client: httpx.AsyncClient):
        self.client = client

    def submit(self, i: int) -> Callable[[], Awaitable[str]]:
        async def call() -> str:
            answer = await self.client.post("/v1/gangs", json=submission(i),
                                            headers={"Idempotency-Key": str(uuid.uuid4())})
            assert answer.status_code == 201, answer.text
            return answer.json()["gang_id"]
        return call

    def status(self, gang_id: str) -> Callable[[], Awaitable[str]]:
        async def call() -> str:
            answer = await self.client.get(f"/v1/gangs/{gang_id}")
            assert answer.status_code == 200, answer.text
            return answer.json()["state"]
        return call

    def healthz(self) -> Callable[[], Awaitable[str]]:
        async def call() -> str:
            answer = await self.client.get("/healthz")
            assert answer.status_code == 200, answer.text
            return answer.json()["status"]
        return call


class Direct:
    """The same requests as calls of the scheduler actor (what the API itself awaits)."""

    def __init__(self, handle):
        self.handle = handle

    def submit(self, i: int) -> Callable[[], Awaitable[str]]:
        parsed = GangSubmission.model_validate(submission(i))
        spec, programs = parsed.gang_spec(), parsed.programs()

        async def call() -> str:
            return await self.handle.submit.remote(spec, programs, f"bench:{uuid.uuid4()}")
        return call

    def status(self, gang_id: str) -> Callable[[], Awaitable[str]]:
        async def call() -> str:
            return (await self.handle.status.remote(gang_id)).state.value
        return call


async def one_run(side, first: int, n: int, concurrency: int, handle) -> dict[str, tuple]:
    """Submit `n` gangs, read each one's status, then cancel them all."""
    ids, submit_lat, submit_s = await measure([side.submit(first + i) for i in range(n)],
                                              concurrency)
    states, status_lat, status_s = await measure([side.status(g) for g in ids], concurrency)
    assert len(set(ids)) == n and set(states) <= {"PENDING", "ADMITTED", "RESERVED",
                                                  "STARTING", "RUNNING"}, states
    await asyncio.gather(*(handle.cancel.remote(g) for g in ids))
    return {"submit": (submit_lat, submit_s), "status": (status_lat, status_s)}


def summary(runs: list[tuple[list[float], float]]) -> tuple[float, float, float]:
    """(requests/s, p50 ms, p99 ms) over the runs."""
    latencies = [x for lat, _ in runs for x in lat]
    rate = len(latencies) / sum(elapsed for _, elapsed in runs)
    p99 = statistics.quantiles(latencies, n=100)[98] if len(latencies) > 1 else latencies[0]
    return rate, 1000 * statistics.median(latencies), 1000 * p99


async def bench(url: str, token: str, handle, n: int, concurrency: int) -> dict:
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits,
                                 headers={"Authorization": f"Bearer {token}"}) as client:
        rest, direct = Rest(client), Direct(handle)
        warm = 2 * concurrency  # connections, worker pools, code paths
        await one_run(rest, 10**6, warm, concurrency, handle)
        await one_run(direct, 2 * 10**6, warm, concurrency, handle)
        measured: dict[tuple[str, str], list] = {}
        half = max(1, n // 2)
        for run, (name, side) in enumerate([("rest", rest), ("direct", direct),
                                            ("direct", direct), ("rest", rest)]):
            result = await one_run(side, run * half, half, concurrency, handle)
            for op, figures in result.items():
                measured.setdefault((name, op), []).append(figures)
        _, lat, elapsed = await measure([rest.healthz() for _ in range(n)], concurrency)
        measured[("rest", "healthz")] = [(lat, elapsed)]
    return {key: summary(runs) for key, runs in measured.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=1000, help="requests per operation and side")
    parser.add_argument("--concurrency", type=int, default=50, help="concurrent clients")
    parser.add_argument("--address", help="an existing cluster instead of a new one")
    args = parser.parse_args()

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a throwaway local cluster
    if args.address:
        ray.init(address=args.address, log_to_driver=False)
        handle = raygang.start()
        wanted = CONFIG.queues[1].limit
        if not any(q.name == QUEUE and q.limit == wanted for q in raygang.queues()):
            raise SystemExit(f"the scheduler at {args.address} has no queue {QUEUE!r} "
                             f"limited to {wanted}")
    else:  # address="local": always a new cluster, never one a stale /tmp/ray file points to
        ray.init(address="local", num_cpus=4, num_gpus=GPUS, include_dashboard=False,
                 log_to_driver=False)
        handle = raygang.start(CONFIG)
    token = secrets.token_urlsafe(24)
    api = serve_in_thread(AuthConfig([(digest(token), Principal(name="bench", admin=True))]))
    try:
        figures = asyncio.run(bench(api.url, token, handle, args.n, args.concurrency))
    finally:
        api.stop()
        if not args.address:  # a joined cluster keeps its scheduler (each run cancels its gangs)
            raygang.shutdown()  # cancels whatever is left
        ray.shutdown()

    print(f"api_load: {args.n} requests per operation and side, {args.concurrency} concurrent "
          f"clients; queue {QUEUE!r} (1 GPU): one gang runs, the rest wait; runs ABBA")
    print(f"{'operation':>9}  {'REST req/s':>10}  {'p50 ms':>7}  {'p99 ms':>7}  "
          f"{'direct req/s':>12}  {'p50 ms':>7}  {'p99 ms':>7}  {'ratio':>6}")
    for op in ("submit", "status"):
        rest, direct = figures[("rest", op)], figures[("direct", op)]
        print(f"{op:>9}  {rest[0]:>10.1f}  {rest[1]:>7.1f}  {rest[2]:>7.1f}  "
              f"{direct[0]:>12.1f}  {direct[1]:>7.1f}  {direct[2]:>7.1f}  "
              f"{rest[0] / direct[0]:>5.2f}x")
    rate, p50, p99 = figures[("rest", "healthz")]
    print(f"HTTP floor (GET /healthz, no scheduler call): {rate:.1f} req/s, "
          f"p50 {p50:.1f} ms, p99 {p99:.1f} ms")
    print("ratio: REST req/s / direct req/s (submit: POST /v1/gangs vs actor submit; "
          "status: GET /v1/gangs/{id} vs actor status)")


if __name__ == "__main__":
    main()
