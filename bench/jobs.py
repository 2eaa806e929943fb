"""Bursts of small Ray Jobs through raygang vs straight to Ray's Job Submission API, and a
Ray Train V2 run's start latency through raygang vs unmanaged; same cluster, same run.

A local cluster (started here; `--address` joins an existing one instead): a head with the
dashboard (2 CPUs, no GPU) and 2 workers of 4 CPUs and 4 virtual GPUs each.

Jobs: N jobs submitted one after the other as fast as one client can, each
`python -c "import time; time.sleep(0.5)"` needing 1 GPU, so on both sides at most 8 run
at once (the GPUs):

- raw: `JobSubmissionClient.submit_job(..., entrypoint_num_gpus=1)`. Ray creates every
  job's supervisor actor at once; those without a GPU wait as pending actors (ray#41241
  asks for a job queue instead);
- raygang: `raygang.submit_job(..., gpus=1)`. The job waits in raygang's queue; its Ray
  job is submitted only once its GPU is reserved.

Per run: completed, failed (by how), unfinished after the timeout (counted as failures),
submission time, seconds from the first submission to the last job's end as each side
records it, jobs/s, and the peak RSS of the cluster's processes sampled every 0.5 s
(the whole local cluster, and the head node's processes alone). Each burst size runs
raw, raygang, raygang, raw (ABBA) after a warm-up, up to `--abba-up-to` jobs (50); a larger
burst runs raw then raygang once (a 200-job run takes ~3 minutes here).

Train: `fit()` until rank 0 first calls `ray.train.report` (a timestamp it writes), for a
`DataParallelTrainer` of 2 workers with `use_gpu=True`, unmanaged vs `raygang.train(...)`,
alternating; medians, the ratio, and how often raygang's hand-off failed.

The hand-off window: Train runs through raygang one after another, quiet and then beside
a neighbour starting 1-GPU tasks outside raygang; how long the window is (the claim's
return -> Train's group placed) and how often the neighbour took the capacity in it.

    python bench/jobs.py            # bursts 50 and 200, 3 Train runs each, 10 hand-offs
                                    # per condition: ~13 min here
    python bench/jobs.py --quick    # burst 2, raw then raygang, no warm-up, no Train run
                                    # (each costs ~20 CPU-s here): for tests
    python bench/jobs.py --quick --handoff-runs 1   # and the hand-off window's quiet row
    python bench/jobs.py --bursts 1000 --sides raygang --train-runs 0 --handoff-runs 0 \
        --timeout 2400              # 1,000 jobs at once, all accepted, listed and run
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

import ray  # noqa: E402
import ray.train  # noqa: E402
from ray.cluster_utils import Cluster  # noqa: E402
from ray.job_submission import JobStatus, JobSubmissionClient  # noqa: E402
from ray.train import RunConfig, ScalingConfig  # noqa: E402
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer  # noqa: E402

import psutil  # noqa: E402  (Ray ships it: ray/thirdparty_files, on the path after `import ray`)

import raygang  # noqa: E402
from raygang.runtime.client.train_callback import RaygangTrain, _gang_name  # noqa: E402
from raygang.runtime.ray_private import dashboard_url  # noqa: E402
from ray.util.placement_group import placement_group_table  # noqa: E402

ENTRYPOINT = f"{sys.executable} -c \"import time; time.sleep(0.5)\""
MIB = 1024 * 1024


# Memory -----------------------------------------------------------------------------------
class MemorySampler(threading.Thread):
    """Peak summed RSS of the processes under `roots` (and under `head_roots` alone),
    sampled every `period` seconds until `stop()`. Roots are the nodes' own processes
    (gcs_server, raylet, dashboard...); workers and job drivers are their descendants."""

    def __init__(self, roots: set[int], head_roots: set[int] | None, period: float = 0.5):
        super().__init__(daemon=True)
        self.roots, self.head_roots, self.period = roots, head_roots, period
        self.peak = self.head_peak = 0
        self.load, self.others = 0.0, 0  # 1-min load average; other clusters' GCS here
        self._done = threading.Event()
        self.start()

    def run(self) -> None:
        while True:
            self.sample()
            if self._done.wait(self.period):
                return

    def sample(self) -> None:
        children: dict[int, list[int]] = {}
        rss: dict[int, int] = {}
        for p in psutil.process_iter(["ppid", "memory_info"]):
            if p.info["memory_info"] is not None:
                children.setdefault(p.info["ppid"], []).append(p.pid)
                rss[p.pid] = p.info["memory_info"].rss
        self.load = max(self.load, os.getloadavg()[0])
        self.others = max(self.others, other_clusters(self.roots))
        self.peak = max(self.peak, _tree_rss(self.roots, children, rss))
        if self.head_roots is not None:
            self.head_peak = max(self.head_peak, _tree_rss(self.head_roots, children, rss))

    def stop(self, out: Outcome) -> None:
        self._done.set()
        self.join()
        out.peak_mib, out.load, out.others = self.peak / MIB, self.load, self.others
        out.head_mib = self.head_peak / MIB if self.head_roots is not None else None


def _tree_rss(roots: set[int], children: dict[int, list[int]], rss: dict[int, int]) -> int:
    seen, todo = set(), [pid for pid in roots if pid in rss]
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo.extend(children.get(pid, []))
    return sum(rss[pid] for pid in seen)


def node_roots(node) -> set[int]:
    """The processes a `ray._private.node.Node` of `Cluster` started (raylet, gcs_server,
    dashboard, log monitor...): `all_processes` is private Ray, fine for a benchmark."""
    return {info.process.pid for infos in node.all_processes.values() for info in infos}


def other_clusters(roots: set[int]) -> int:
    """How many other Ray clusters run on this machine now (their GCS servers)."""
    return sum(p.info["name"] == "gcs_server" and p.pid not in roots
               for p in psutil.process_iter(["name"]))


def machine_roots() -> set[int]:
    """With `--address`: every Ray node process on this machine (any cluster)."""
    marks = ("ray/dashboard/", "log_monitor.py", "autoscaler/_private/monitor.py")
    roots = set()
    for p in psutil.process_iter(["name", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if p.info["name"] in ("raylet", "gcs_server") or any(m in cmd for m in marks):
            roots.add(p.pid)
    return roots - {os.getpid()}


# Bursts -----------------------------------------------------------------------------------
@dataclass
class Outcome:
    side: str
    burst: int
    completed: int = 0
    failures: Counter = field(default_factory=Counter)  # how -> count
    unfinished: int = 0
    submit_s: float = 0.0
    seconds: float = 0.0
    peak_mib: float = 0.0
    head_mib: float | None = None
    load: float = 0.0
    others: int = 0

    @property
    def failed(self) -> int:
        return sum(self.failures.values()) + self.unfinished


def first_line(text: str | None) -> str:
    lines = (text or "").strip().splitlines()
    return lines[0][:110] if lines else ""


def run_raw(client: JobSubmissionClient, n: int, run: str, timeout: float,
            sampler: MemorySampler) -> Outcome:
    # Ids of this process's own: a job of an earlier run on a joined cluster keeps its id
    # (and its supervisor actor's name) for a while after it is deleted.
    out, ids = Outcome("raw", n), [f"rawbench-{os.getpid()}-{run}-{i}" for i in range(n)]
    started = time.time()
    for job_id in ids:
        try:
            client.submit_job(entrypoint=ENTRYPOINT, submission_id=job_id,
                              entrypoint_num_gpus=1)
        except Exception as error:  # noqa: BLE001 - a failure of raw Ray, counted
            out.failures[f"submit: {type(error).__name__}: {first_line(str(error))}"] += 1
    out.submit_s = time.time() - started
    deadline, last = started + timeout, {}
    while time.time() < deadline:
        last = {j.submission_id: j for j in client.list_jobs() if j.submission_id in ids}
        if all(JobStatus(j.status).is_terminal() for j in last.values()):
            break
        time.sleep(0.5)
    sampler.stop(out)
    ends = [j.end_time / 1000 for j in last.values() if j.end_time]
    out.seconds = (max(ends) if ends else time.time()) - started
    for job in last.values():
        status = JobStatus(job.status)
        if status == JobStatus.SUCCEEDED:
            out.completed += 1
        elif status.is_terminal():
            out.failures[f"{status.value}: {first_line(job.message)}"] += 1
        else:
            out.unfinished += 1
    clean_raw(client, ids)
    return out


def clean_raw(client: JobSubmissionClient, ids: list[str]) -> None:
    """Stop what still runs or waits, then delete every job of the run (its record and
    logs), so that later runs list no more jobs than earlier ones."""
    for job_id in ids:
        try:
            if not client.get_job_status(job_id).is_terminal():
                client.stop_job(job_id)
        except RuntimeError:  # never submitted
            pass
    for job_id in ids:
        deadline = time.time() + 60
        while time.time() < deadline:
            try:
                if client.get_job_status(job_id).is_terminal():
                    client.delete_job(job_id)
                    break
            except RuntimeError:
                break
            time.sleep(0.2)


def run_raygang(n: int, run: str, timeout: float, sampler: MemorySampler) -> Outcome:
    out = Outcome("raygang", n)
    started = time.time()
    refs = []
    for i in range(n):
        try:
            refs.append(raygang.submit_job(ENTRYPOINT, gpus=1, name=f"{run}-{i}"))
        except Exception as error:  # noqa: BLE001 - counted like raw Ray's
            out.failures[f"submit: {type(error).__name__}: {first_line(str(error))}"] += 1
    out.submit_s = time.time() - started
    ids, deadline, last = {r.gang_id for r in refs}, started + timeout, {}
    while time.time() < deadline:
        last = {s.gang_id: s for s in raygang.list_jobs() if s.gang_id in ids}
        if len(last) == len(ids) and all(s.finished for s in last.values()):
            break
        time.sleep(0.5)
    sampler.stop(out)
    ends = [s.finished_at for s in last.values() if s.finished_at]
    out.seconds = (max(ends) if ends else time.time()) - started
    for status in last.values():
        if status.state is raygang.GangState.SUCCEEDED:
            out.completed += 1
        elif status.finished:
            why = status.error.message if status.error else status.reason
            out.failures[f"{status.state.value}: {first_line(why)}"] += 1
        else:
            out.unfinished += 1
    out.unfinished += len(ids) - len(last)
    for ref in refs:  # stop what still waits or runs (a no-op for finished jobs)
        if ref.gang_id not in last or not last[ref.gang_id].finished:
            ref.stop()
    return out


def wait_idle(gpus: float, timeout: float = 60) -> None:
    """Until every GPU is free again, then a moment for exiting workers to go."""
    deadline = time.time() + timeout
    while ray.available_resources().get("GPU", 0) < gpus and time.time() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)


# Train ------------------------------------------------------------------------------------
def train_func(config):
    """Mark when rank 0 first reports; no torch, virtual GPUs."""
    if ray.train.get_context().get_world_rank() == 0:
        Path(config["mark"]).write_text(repr(time.time()))
    ray.train.report({"step": 0})


def train_once(managed: bool, name: str, storage: Path) -> tuple[float, int]:
    """Seconds from `fit()` to rank 0's first report; hand-off failures (raygang)."""
    mark = storage / f"{name}.mark"
    trainer = DataParallelTrainer(
        train_func, train_loop_config={"mark": str(mark)},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=True),
        run_config=RunConfig(name=name, storage_path=str(storage)))
    started = time.time()
    result = raygang.train(trainer) if managed else trainer.fit()
    if result.error is not None:
        raise RuntimeError(f"Train run {name} failed: {result.error}")
    latency = float(mark.read_text()) - started
    if not managed:
        return latency, 0
    gangs = [g for g in raygang.list_gangs() if g.kind == "train" and g.name == _gang_name(name)]
    events = raygang.GangRef(gangs[-1].gang_id).status().events
    return latency, sum("hand-off failed" in (e.reason or "") for e in events)


def train_runs(runs: int, warmup: bool, gpus: float, roots: set[int], storage: Path,
               sides: tuple[bool, ...] = (False, True)):
    """Start latencies by side (managed or not: `sides`), hand-off failures, other clusters
    seen meanwhile."""
    if warmup:
        for managed in sides:
            train_once(managed, f"warm-{int(managed)}", storage)
            wait_idle(gpus)
    times: dict[str, list[float]] = {"unmanaged": [], "raygang": []}
    handoff_failed, others = 0, other_clusters(roots)
    for i in range(runs):
        for managed in (sides if i % 2 == 0 else sides[::-1]):
            side = "raygang" if managed else "unmanaged"
            latency, failed = train_once(managed, f"{side}-{i}", storage)
            times[side].append(latency)
            handoff_failed += failed
            others = max(others, other_clusters(roots))
            wait_idle(gpus)
    return times, handoff_failed, others


def bench_train(runs: int, warmup: bool, gpus: float, roots: set[int]) -> None:
    """Unmanaged and raygang Train runs, alternating."""
    with tempfile.TemporaryDirectory(prefix="raygang-bench-train-") as storage:
        times, handoff_failed, others = train_runs(runs, warmup, gpus, roots, Path(storage))
    order = ", alternating"
    print(f"train: DataParallelTrainer, 2 workers, use_gpu=True, no torch; fit() -> rank 0's "
          f"first ray.train.report; {runs} run(s) each{order}"
          f"{' after a warm-up' if warmup else ''}; other Ray clusters seen on this machine "
          f"meanwhile: up to {others}")
    for side, values in times.items():
        print(f"  {side:<9}  start s: {' '.join(f'{v:.2f}' for v in values)}  "
              f"median {statistics.median(values):.2f}")
    ratio = statistics.median(times["raygang"]) / statistics.median(times["unmanaged"])
    print(f"train start latency raygang/unmanaged (medians): {ratio:.2f}x")
    print(f"raygang hand-off failed: {handoff_failed} time(s) in {runs} raygang run(s)")


# The hand-off window ----------------------------------------------------------------------
class TimedTrain(RaygangTrain):
    """raygang's Train callback, timing the hand-off window of each worker group: from the
    claim's return in the controller (raygang has removed the holds) to Train's placement
    group placed (the time until Train creates it, plus Ray's own creation latency of that
    group). Appends "<window s>" per worker group to `marks`."""

    def __init__(self, marks: str, *args):
        super().__init__(*args)
        self.marks = marks
        self._claimed = self._creating = 0.0

    def __reduce__(self):
        cls, args = super().__reduce__()
        return cls, (self.marks, *args)

    def on_controller_start_worker_group(self, **kwargs):
        selector = super().on_controller_start_worker_group(**kwargs)
        self._claimed = time.time()
        return selector

    def before_worker_group_start(self, worker_group_context) -> None:
        self._creating = time.time()

    def after_worker_group_start(self, worker_group) -> None:
        group = worker_group.get_worker_group_state().placement_group_handle.placement_group
        stats = placement_group_table(group).get("stats") or {}
        window = self._creating - self._claimed + stats["end_to_end_creation_latency_ms"] / 1e3
        with open(self.marks, "a") as out:
            out.write(f"{window:.4f}\n")
        super().after_worker_group_start(worker_group)


@ray.remote(num_gpus=1, num_cpus=0)
def outside_task(seconds: float) -> None:
    time.sleep(seconds)


class Neighbour(threading.Thread):
    """Work started outside raygang: 1-GPU tasks of `seconds` each, arriving as a Poisson
    stream sized to keep `busy` GPUs busy on average. When the GPUs outside raygang's are
    all taken, arrivals wait in Ray's queue, and one that waits while raygang hands a
    Train run's GPUs over takes one of them: the hand-off window hit."""

    def __init__(self, busy: float, seconds: float = 4.0):
        super().__init__(daemon=True)
        self.rate, self.seconds = busy / seconds, seconds
        self.refs: list = []
        self._done = threading.Event()
        self.start()

    def run(self) -> None:
        import random
        rng = random.Random(7)
        while not self._done.wait(rng.expovariate(self.rate)):
            self.refs.append(outside_task.remote(self.seconds))

    def stop(self) -> None:
        self._done.set()
        self.join()
        for ref in self.refs:
            ray.cancel(ref)
        ray.wait(self.refs, num_returns=len(self.refs), timeout=60)


def handoff_runs(runs: int, busy: float, storage: Path) -> dict:
    """`runs` Train runs through raygang, one after the other, beside a neighbour keeping
    `busy` GPUs busy on average (0: none)."""
    neighbour = Neighbour(busy) if busy else None
    marks = storage / f"windows-{busy:g}.txt"
    hits = requeues = 0
    latencies = []
    try:
        for i in range(runs):
            name = f"handoff-{busy:g}-{i}"
            trainer = DataParallelTrainer(
                train_func, train_loop_config={"mark": str(storage / f"{name}.mark")},
                scaling_config=ScalingConfig(num_workers=2, use_gpu=True),
                run_config=RunConfig(name=name, storage_path=str(storage),
                                     callbacks=[TimedTrain(str(marks))]))
            started = time.time()
            print(f"  {name} ...", end=" ", flush=True)
            result = trainer.fit()
            print(f"{time.time() - started:.1f} s", flush=True)
            if result.error is not None:
                raise RuntimeError(f"Train run {name} failed: {result.error}")
            latencies.append(float((storage / f"{name}.mark").read_text()) - started)
            gang = [g for g in raygang.list_gangs() if g.name == _gang_name(name)][-1]
            reasons = [e.reason or "" for e in raygang.GangRef(gang.gang_id).status().events]
            hits += sum("hand-off failed" in r for r in reasons)
            requeues += sum(e.startswith("requeued") for e in reasons)
    finally:
        if neighbour is not None:
            neighbour.stop()
    windows = [float(w) for w in marks.read_text().split()] if marks.exists() else []
    return {"busy": busy, "runs": runs, "hits": hits, "requeues": requeues,
            "windows": windows, "latencies": latencies,
            "outside": len(neighbour.refs) if neighbour else 0}


def bench_handoff(runs: int, gpus: float, neighbours: tuple[float, ...]) -> list[dict]:
    """How long the hand-off window is, and how often work started outside raygang takes
    the capacity in it: for each neighbour (GPUs it keeps busy on average; 0: quiet)."""
    with tempfile.TemporaryDirectory(prefix="raygang-bench-handoff-") as storage:
        return [handoff_runs(runs, busy, Path(storage)) for busy in neighbours]


def print_handoff(rows: list[dict], runs: int, gpus: float) -> None:
    print(f"hand-off window: {runs} Train run(s) of 2 workers (use_gpu=True) through raygang, "
          f"one after another, quiet and beside a neighbour: 1-GPU tasks of 4 s started "
          f"outside raygang (Poisson arrivals) keeping "
          f"on average {(gpus - 2) / 2:g} of the "
          f"{gpus - 2:g} GPUs the run does not need busy, so some arrivals wait for a GPU; "
          f"window = the "
          f"claim's return in Train's controller (holds removed) -> Train's placement group "
          f"placed")
    print(f"{'neighbour':>10} {'runs':>5} {'outside':>8} {'hits':>5} {'requeues':>9} "
          f"{'window med ms':>14} {'max ms':>7} {'start med s':>12}")
    for row in rows:
        w = row["windows"] or [float("nan")]
        label = f"{row['busy']:g} GPUs" if row["busy"] else "none"
        print(f"{label:>10} {row['runs']:>5} {row['outside']:>8} {row['hits']:>5} "
              f"{row['requeues']:>9} {statistics.median(w) * 1e3:>14.0f} "
              f"{max(w) * 1e3:>7.0f} {statistics.median(row['latencies']):>12.2f}")
    print("hits: hand-offs that failed (Train's group not placed on the handed-over nodes; "
          "the run was requeued and started again); every run above completed")


# Main -------------------------------------------------------------------------------------
def bench_jobs(bursts: list[int], abba_up_to: int, timeout: float, roots, gpus: float,
               sides: tuple[str, ...] = ("raw", "raygang"), warmup: bool = True) -> None:
    client = JobSubmissionClient(dashboard_url())
    warm = []
    for side in sides if warmup else ():  # warm-up: dashboard, job agent, worker processes
        warm.append(run_side(side, client, 2, f"warm-{side}", timeout, roots))
        wait_idle(gpus)
    if len(sides) == 1:
        order = f"{sides[0]} only"
    elif abba_up_to:
        order = (f"runs raw, raygang, raygang, raw (ABBA) for bursts up to {abba_up_to}, raw "
                 f"then raygang above")
    else:
        order = "runs raw then raygang"
    print(f"jobs: each `python -c 'time.sleep(0.5)'` with 1 GPU; {gpus:g} GPUs, so at most "
          f"{gpus:g} run at once on both sides; {order}; timeout {timeout:g} s a run "
          f"(unfinished jobs count as failed)")
    head = ("; head = the head node's processes alone (GCS, dashboard, raylet and its "
            "workers, raygang's scheduler among them; the drivers run on the workers: raw "
            "ones hold a GPU there, raygang's on the node of their held GPU)"
            ) if roots[1] is not None else ""
    print(f"memory: peak RSS sum, every 0.5 s, of {roots[2]}{head}")
    print(f"{'burst':>6}  {'side':<8} {'completed':>9} {'failed':>6} {'submit s':>8} "
          f"{'seconds':>8} {'jobs/s':>7} {'peak MiB':>8} {'head MiB':>8} {'load':>5}")
    outcomes = []
    print("warm-up (not counted): " + (", ".join(
        f"{w.side} {w.completed}/{w.burst} in {w.seconds:.1f} s" for w in warm) or "none"))
    for n in bursts:
        rate = {"raw": [0, 0.0], "raygang": [0, 0.0]}
        runs = sides + (sides[::-1] if n <= abba_up_to and len(sides) == 2 else ())
        for k, side in enumerate(runs):
            out = run_side(side, client, n, f"b{n}r{k}", timeout, roots)
            outcomes.append(out)
            rate[side][0] += out.completed
            rate[side][1] += out.seconds
            head = f"{out.head_mib:>8.0f}" if out.head_mib is not None else f"{'-':>8}"
            print(f"{n:>6}  {side:<8} {out.completed:>9} {out.failed:>6} {out.submit_s:>8.2f} "
                  f"{out.seconds:>8.2f} {out.completed / out.seconds:>7.2f} "
                  f"{out.peak_mib:>8.0f} {head} {out.load:>5.1f}", flush=True)
            wait_idle(gpus)
        if len(sides) == 2:
            raw, rg = (rate[s][0] / rate[s][1] for s in ("raw", "raygang"))
            ratio = f"{rg / raw:.2f}x" if raw else "n/a (raw completed none)"
            print(f"{n:>6}  raygang/raw jobs/s: {ratio} (raw {raw:.2f}, raygang {rg:.2f})")
    print_after(client, warm + outcomes, timeout)


def print_after(client: JobSubmissionClient, outcomes: list[Outcome], timeout: float) -> None:
    """What is left in Ray, how busy the machine was, and every failure by how."""
    left = [j.submission_id for j in client.list_jobs()  # not drivers (this script is one)
            if j.submission_id and not JobStatus(j.status).is_terminal()]
    print(f"left pending or running after the bursts: {len(left)} Ray job(s)")
    others = max(out.others for out in outcomes)
    print(f"load: peak 1-min load average during the run ({os.cpu_count()} cores); other "
          f"Ray clusters seen on this machine meanwhile: up to {others}")
    for out in outcomes:
        for how, count in sorted(out.failures.items()):
            print(f"  failed: burst {out.burst} {out.side}: {count} x {how}")
        if out.unfinished:
            print(f"  failed: burst {out.burst} {out.side}: {out.unfinished} x unfinished "
                  f"after {timeout:g} s (stopped)")


def run_side(side: str, client, n: int, run: str, timeout: float, roots) -> Outcome:
    sampler = MemorySampler(roots[0], roots[1])
    if side == "raw":
        return run_raw(client, n, run, timeout, sampler)
    return run_raygang(n, run, timeout, sampler)


def connect(address: str) -> None:
    """`ray.init`, with RAY_ADDRESS in the env of this job's workers: a worker that asks
    the State API without an address (Ray Train's placement-group cleaner does) otherwise
    reaches the newest cluster on this machine, and with another one running here it
    takes the Train controller for dead and removes a healthy run's placement group."""
    env = {} if address == "auto" else {"env_vars": {"RAY_ADDRESS": address}}
    ray.init(address=address, runtime_env=env or None, log_to_driver=False,
             logging_level="ERROR")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bursts", default="50,200", help="jobs per burst, comma-separated")
    parser.add_argument("--abba-up-to", type=int, default=50,
                        help="bursts up to this size run ABBA, larger ones raw then raygang")
    parser.add_argument("--train-runs", type=int, default=3)
    parser.add_argument("--handoff-runs", type=int,
                        help="Train runs per condition of the hand-off window (0: skip; "
                             "default 10, 0 with --quick)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per burst run")
    parser.add_argument("--address", help="an existing cluster (with the dashboard)")
    parser.add_argument("--sides", default="raw,raygang",
                        help="which sides run the bursts: raw,raygang or one of them")
    parser.add_argument("--quick", action="store_true",
                        help="burst 2, raw then raygang, no warm-up, no Train run unless "
                             "--handoff-runs asks (for tests)")
    args = parser.parse_args(argv)
    if args.quick:  # each Train run costs ~5 s here, ~20 s on a loaded machine
        args.bursts, args.abba_up_to, args.train_runs, args.timeout = "2", 0, 0, 120
    if args.handoff_runs is None:
        args.handoff_runs = 0 if args.quick else 10
    bursts = [int(b) for b in args.bursts.split(",") if b]

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # Cluster() nodes start without it
    cluster = None
    if args.address:
        connect(args.address)
        roots = (machine_roots(), None, "every Ray process on this machine")
    else:
        # Free ports for the dashboard and the head's agent: another cluster on this
        # machine holds the defaults, and without its agent the head takes no job.
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 2, "num_gpus": 0, "include_dashboard": True, "dashboard_port": 0,
            "dashboard_agent_listen_port": None})
        workers = [cluster.add_node(num_cpus=4, num_gpus=4) for _ in range(2)]
        connect(cluster.address)
        cluster.wait_for_nodes()
        head = node_roots(cluster.head_node)
        roots = (head.union(*(node_roots(w) for w in workers)), head,
                 "the whole local cluster (head and 2 workers share this machine)")
    try:
        raygang.start()
        gpus = ray.cluster_resources().get("GPU", 0)
        if bursts:
            bench_jobs(bursts, args.abba_up_to, args.timeout, roots, gpus,
                       tuple(args.sides.split(",")), warmup=not args.quick)
        if args.train_runs:
            bench_train(args.train_runs, warmup=not args.quick, gpus=gpus, roots=roots[0])
        else:
            print("train: not run (--train-runs 0)")
        if args.handoff_runs:
            neighbours = (0,) if args.quick else (0, (gpus - 2) / 2)
            print_handoff(bench_handoff(args.handoff_runs, gpus, neighbours),
                          args.handoff_runs, gpus)
        else:
            print("hand-off window: not run (--handoff-runs 0)")
    finally:
        if cluster is not None:  # a joined cluster keeps its scheduler
            raygang.shutdown()
        ray.shutdown()
        if cluster is not None:
            cluster.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
