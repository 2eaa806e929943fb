"""The head's faults under a mixed load: the GCS killed three times, then the head replaced.

    python bench/head_faults.py                  # with Redis (GCS fault tolerance): ~6 min
    python bench/head_faults.py --outage 10      # shorter outages
    python bench/head_faults.py --no-redis       # the same load, one GCS kill, no Redis

On a Ray cluster of its own: a head that takes no work and runs the scheduler (as KubeRay
runs it; Debian's redis-server as the GCS's store), two worker nodes of 4 (logical) GPUs.
The load, all under way when the first outage comes:
- 20 gangs of one member (10 at the start, 2 submitted during each outage, 4 after the
  head's replacement); each member writes a line per second to a file of its gang, with
  its process id, so that two attempts running at once, or a body completed twice, show;
- 2 preemptions under way: two batch gangs of 2 GPUs each, preempted by an inference gang
  of 3 x 2 GPUs just before the first outage, each taking 20 s to checkpoint (an
  `on_preempt` hook, which writes a `checkpoint` line) of its 40 s grace period;
- a Ray Job queued behind them (4 GPUs), a Ray Train V2 run in a Ray Job
  (`examples/jobs/train.py`, 2 GPUs) and an elastic Serve deployment (1 to 2 replicas).
The GCS is killed for `--outage` seconds three times, `--between` seconds apart; then every
process of the head is killed and a new head started on the same port and Redis
(KubeRay's head pod deletion). Measured and checked: gangs lost (submitted, unknown to
the scheduler after), placement groups and member actors left once everything ended,
bodies run twice (two attempts' lines interleaved, or two `done` lines), whether the
scheduler's process stayed the same across the GCS kills, each submission made during an
outage: when it was admitted after the GCS returned; after the head's replacement, when
the scheduler was ready, and what it adopted and requeued; the event loop's longest
answer to a ping from a thread every 0.2 s during the outages.

Without Redis the GCS keeps everything in the head's memory: a restarted GCS knows
nothing, and Ray's raylets exit when they find it so. The bench then kills the GCS once,
starts it again, and reports what is left: it is never a silent success.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout

from raygang.runtime.ports import free_port  # noqa: E402
from member_files import twice, writers  # noqa: E402  (bench/)
from tests.integration.gcs_outage import (  # noqa: E402
    HEAD, new_head, shut_down, start_on_head, start_redis,
)

SLOT = "slot"  # the one-member gangs' resource: 10 per worker node, no CPU or GPU taken
TRAIN = ROOT / "examples" / "jobs" / "train.py"
# Its steps: under way through every fault (a step takes ~2 s, Train's report poll), and
# done within the jobs' wait after the head's replacement, which restarts it from step 0
# (the example checkpoints only when preempted)
TRAIN_STEPS = 150


def progress(what: str) -> None:
    print(f"[head_faults {time.strftime('%H:%M:%S')}] {what}", file=sys.stderr, flush=True)


def body(seconds: float, log_dir: str) -> str:
    """A member: a line per second (`<pid> <monotonic time>`) to its gang's file while it
    runs, then `done`; a preemption's hook takes 20 s (its checkpoint)."""
    import raygang

    ctx = raygang.get_context()
    path = Path(log_dir) / f"{ctx.gang_id}.{ctx.rank}"  # a file per member

    def checkpoint() -> None:
        time.sleep(20.0)
        with path.open("a") as f:
            f.write(f"{os.getpid()} checkpoint {time.monotonic():.3f}\n")

    ctx.on_preempt(checkpoint)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.preempted:
        with path.open("a") as f:
            f.write(f"{os.getpid()} {time.monotonic():.3f}\n")
        time.sleep(1.0)
    if ctx.preempted:
        while True:  # the teardown ends it
            time.sleep(1.0)
    with path.open("a") as f:
        f.write(f"{os.getpid()} done {time.monotonic():.3f}\n")
    return "done"


class Pinger:
    """The scheduler's event loop, pinged from a thread every 0.2 s: each answer's time."""

    def __init__(self, handle_of):
        self.answers: list[tuple[float, float | str]] = []
        self._handle_of = handle_of
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        import ray

        while not self._stop.is_set():
            started = time.monotonic()
            try:
                ray.get(self._handle_of().ping.remote(), timeout=60)
                self.answers.append((started, time.monotonic() - started))
            except Exception as error:  # noqa: BLE001 - counted as a failed ping
                self.answers.append((started, type(error).__name__))
            time.sleep(0.2)

    def within(self, spans: list[tuple[float, float]]) -> dict:
        during = [d for t, d in self.answers if any(a <= t <= b for a, b in spans)]
        timed = [d for d in during if isinstance(d, float)]
        return {"pings": len(during), "failed": len(during) - len(timed),
                "longest_s": round(max(timed, default=0.0), 3)}

    def stop(self) -> None:
        """Stop, and wait for the last ping (a Ray call after `ray.shutdown` ends the
        process)."""
        self._stop.set()
        self._thread.join(timeout=70)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--outage", type=float, default=30.0, help="seconds per GCS kill")
    parser.add_argument("--between", type=float, default=15.0,
                        help="seconds between the GCS's return and the next kill")
    parser.add_argument("--no-redis", action="store_true",
                        help="no GCS fault tolerance: one GCS kill, and what is lost")
    args = parser.parse_args(argv)
    if shutil.which("redis-server") is None and not args.no_redis:
        parser.error("redis-server is not installed (Debian: apt-get install redis-server)")
    redis = None if args.no_redis else start_redis("raygang-bench")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    import ray
    from ray.cluster_utils import Cluster

    import raygang
    from raygang.runtime.client.connection import scheduler
    from tests.integration import leaks

    cluster = Cluster(initialize_head=True, head_node_args=HEAD | {
        "gcs_server_port": free_port()})
    logs = tempfile.mkdtemp(prefix="rg-head-faults-")
    storage = tempfile.mkdtemp(prefix="rg-head-faults-train-")
    result: dict = {"redis": redis is not None, "outage_s": args.outage}
    try:
        for _ in range(2):
            cluster.add_node(num_cpus=4, num_gpus=4, resources={SLOT: 10})
        ray.init(address=cluster.address)
        cluster.wait_for_nodes()
        start_on_head()
        t0 = time.monotonic()
        # Above the queued job's priority: with backfill off they would wait behind it
        one = raygang.gang_task(body, num_cpus=0, resources={SLOT: 1}, max_restarts=2,
                                priority=500)
        gangs = [one.options(name=f"base{i}").remote(30.0 + 12 * i, logs) for i in range(10)]
        train = raygang.submit_job(f"{sys.executable} {TRAIN} {storage} {TRAIN_STEPS}",
                                   gpus=2, name="train", max_restarts=2)
        elastic = raygang.deploy("elastic", "raygang.demo:echo", replicas=(1, 2),
                                 num_cpus=0.5)
        batch = raygang.gang_task(body, num_cpus=0, num_gpus=2, priority="batch",
                                  preemption_grace_s=40)
        victims = [batch.options(name=f"victim{i}").remote(90.0, logs) for i in range(2)]
        progress("waiting for the 10 gangs and 2 victims to run")
        for ref in [*victims, *gangs]:
            ref.ready(timeout=300)
        progress("running; the queued job, then the elastic deployment")
        queued = raygang.submit_job("python -c 'import time; time.sleep(5)'", gpus=4,
                                    name="queued")
        elastic.ready(timeout=300)
        progress("the inference gang preempts the victims")
        # 3 x 2 GPUs: the 2 free and both victims' (the Train run's 2 are training's)
        preemptor = raygang.gang_task(body, name="urgent", replicas=3, num_cpus=0,
                                      num_gpus=2, priority="inference").remote(60.0, logs)
        wait_until(lambda: preemptor.status().state.value != "PENDING", 60,
                   "the inference gang admitted, its victims told")
        time.sleep(2.0)  # their hooks (20 s each) under way when the GCS goes
        result["load_ready_s"] = round(time.monotonic() - t0, 1)
        handle = [scheduler()]
        if args.no_redis:
            return without_redis(cluster, result, handle[0], args.outage, logs)
        pinger = Pinger(lambda: handle[0])
        instance = ray.get(handle[0].ping.remote(), timeout=10)["instance"]
        outages: list[tuple[float, float]] = []
        during: list[tuple[threading.Thread, dict]] = []
        for k in range(3):
            progress(f"GCS kill {k + 1}")
            killed_at = time.monotonic()
            cluster.head_node.kill_gcs_server()
            for i in range(2):
                box: dict = {}
                thread = threading.Thread(target=submit_into, daemon=True, args=(
                    box, one.options(name=f"outage{k}-{i}"), logs))
                thread.start()
                during.append((thread, box))
            time.sleep(args.outage)
            cluster.head_node.start_gcs_server()
            back_at = time.monotonic()
            outages.append((killed_at, back_at))
            for _, box in during[-2:]:
                box["back_wall"] = time.time() - (time.monotonic() - back_at)
            time.sleep(args.between)
        for thread, _ in during:
            thread.join(timeout=120)
        result["pings_during_outages"] = pinger.within(outages)
        ping = ray.get(handle[0].ping.remote(), timeout=30)
        result["scheduler_same_process"] = ping["instance"] == instance
        result["after_outage"] = ping["after_outage"]
        result["submitted_during_outages"] = len(during)
        refusals = [r for _, box in during for r in box.get("refused", [])]
        result["refused_then_submitted_again"] = len(refusals)
        result["refusal"] = refusals[0] if refusals else None
        result["admitted_after_return_s"] = [admitted_after(box) for _, box in during]
        pinger.stop()  # this driver reconnects: no Ray call meanwhile
        progress("the head replaced")
        killed_at = new_head(cluster, HEAD)
        result["head_up_s"] = round(time.monotonic() - killed_at, 1)
        handle[0] = ready_scheduler(scheduler, 180)
        result["ready_after_head_up_s"] = round(
            time.monotonic() - killed_at - result["head_up_s"], 1)
        recovery = ray.get(handle[0].ping.remote(), timeout=30)["recovery"]
        result["recovery"] = {k: recovery[k] for k in ("gangs", "adopted", "requeued",
                                                       "pending", "orphans_removed")}
        later = [one.options(name=f"later{i}").remote(10.0, logs) for i in range(4)]
        refs = {"gang": [*gangs, *victims, preemptor, *later,
                         *(raygang.GangRef(box["id"]) for _, box in during if "id" in box)],
                "job": [train, queued]}
        progress("waiting for every gang and job to end")
        ends = {}
        for kind, kind_refs in refs.items():
            for ref in kind_refs:
                try:
                    status = ref.wait(timeout=600)
                except TimeoutError:  # reported as it stands, then stopped
                    status = ref.status()
                    ref.cancel()
                ends[status.name] = (status.state.value, status.restarts, status.preemptions,
                                     [e.reason for e in status.events
                                      if "requeued" in e.reason or "adopted" in e.reason
                                      or "restart" in e.reason],
                                     status.error.summary if status.error else None)
        status = elastic.status()
        ends["elastic"] = (status.state.value, status.restarts, status.preemptions,
                           [e.reason for e in status.events
                            if "requeued" in e.reason or "adopted" in e.reason])
        raygang.undeploy("elastic")
        result["ends"] = ends
        known = {g.gang_id for g in raygang.list_gangs()} | {
            j.gang_id for j in raygang.list_jobs()}
        submitted = [r.gang_id for rs in refs.values() for r in rs] + [elastic.gang_id]
        result["gangs"] = len(refs["gang"])
        result["lost"] = [g for g in submitted if g not in known]
        result["lost"] += [f"outage submission {i}: {box.get('error')}"
                           for i, (_, box) in enumerate(during) if "id" not in box]
        result["bodies_twice"] = twice(logs)
        result["victims_checkpointed"] = [
            (Path(logs) / f"{v.gang_id}.0").read_text().count("checkpoint") for v in victims]
        result["leaked"] = settled_leaks(leaks, 60)
        result["seconds"] = round(time.monotonic() - t0, 1)
    finally:
        shut_down(cluster, redis)
    report(result)
    return 0


def submit_into(box: dict, task, logs: str) -> None:
    """A submission made while the GCS is down, from a thread of its own. It returns once
    the scheduler's store took it; one the store did not take within its timeout (30 s)
    is refused, saying to submit it again once the GCS answers: done so, as a user would
    (nothing of a refused one is kept: no second gang). Refusals are counted."""
    from raygang.control.errors import StoreError

    box["refused"] = []
    while True:
        try:
            box["id"] = task.remote(10.0, logs).gang_id
            box["returned"] = time.monotonic()
            return
        except StoreError as error:
            box["refused"].append(str(error))
            time.sleep(1.0)
        except Exception as error:  # noqa: BLE001 - reported as lost
            box["error"] = f"{type(error).__name__}: {error}"
            return


def admitted_after(box: dict) -> tuple[float, float] | None:
    """Seconds from the GCS's return to the gang's record in the scheduler (its first
    event: when the store took it) and to its admission (the scheduler's clock): which
    of the two paths a late admission waited on."""
    import raygang

    if "id" not in box:
        return None
    ref, deadline = raygang.GangRef(box["id"]), time.monotonic() + 300
    while True:
        status = ref.status()
        at = next((e.at for e in status.events if e.to_state.value == "ADMITTED"), None)
        if at is not None or status.finished or time.monotonic() > deadline:
            if at is None:
                return None
            return (round(status.events[0].at - box["back_wall"], 2),
                    round(at - box["back_wall"], 2))
        time.sleep(0.5)


def ready_scheduler(scheduler, timeout: float):
    import ray

    deadline = time.monotonic() + timeout
    while True:
        try:
            handle = scheduler()
            if ray.get(handle.ping.remote(), timeout=10)["ready"]:
                return handle
        except Exception:  # noqa: BLE001 - not restarted yet
            if time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def wait_until(check, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"not within {timeout:g}s: {what}")
        time.sleep(0.5)


def settled_leaks(leaks, timeout: float) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        left = [p["name"] for p in leaks.raygang_placement_groups()] \
            + leaks.raygang_member_actors()
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.5)


def without_redis(cluster, result: dict, handle, outage: float, logs: str) -> int:
    """One GCS kill with no Redis behind it, and what is left once it is started again:
    the worker nodes' raylets, the members that were running (their processes, and
    whether they go on writing), the scheduler, and what a driver that connects to the new
    GCS finds there (its nodes and raygang's placement groups)."""
    import ray

    writing = writers(logs)
    cluster.head_node.kill_gcs_server()
    time.sleep(outage)
    cluster.head_node.start_gcs_server()
    restarted = time.monotonic()
    time.sleep(15.0)
    workers = [n for n in cluster.list_all_nodes() if n is not cluster.head_node]
    result["worker_raylets_alive"] = sum(
        any(name == "raylet" for name, _ in n.live_processes()) for n in workers)
    result["workers"] = len(workers)
    result["members_running_before"] = len(writing)
    result["members_running_after"] = len(writing & writers(logs))
    try:
        result["scheduler_answers"] = bool(ray.get(handle.ping.remote(), timeout=10))
    except Exception as error:  # noqa: BLE001 - what was lost
        result["scheduler_answers"] = f"no: {type(error).__name__}"
    # A fresh driver, as `raygang status` would be: what the restarted GCS knows
    probe = ("import json, ray\n"
             f"ray.init(address={cluster.address!r})\n"
             "from ray.util.placement_group import placement_group_table\n"
             "nodes = [n for n in ray.nodes() if n['Alive']]\n"
             "groups = [g for g in placement_group_table().values()\n"
             "          if g['name'].startswith('raygang-')]\n"
             "print('FOUND', json.dumps([len(nodes), len(groups)]))\n")
    try:
        found = subprocess.run([sys.executable, "-c", probe], capture_output=True,
                               text=True, timeout=90)
        line = next((x for x in found.stdout.splitlines() if x.startswith("FOUND ")), None)
        result["new_gcs_finds"] = (dict(zip(("alive_nodes", "raygang_groups"),
                                            json.loads(line[6:])))
                                   if line else f"no answer (exit {found.returncode}: "
                                   f"{(found.stderr.strip().splitlines() or [''])[-1][:200]})")
    except subprocess.TimeoutExpired:
        result["new_gcs_finds"] = "no answer within 90 s"
    # Members left running with no raylet: do they end on their own?
    time.sleep(max(0.0, 60.0 - (time.monotonic() - restarted)))
    result["members_running_60s_after"] = len(writing & writers(logs))
    report(result)
    return 0


def _span(values: list[float]) -> str:
    return f"{min(values):.1f}-{max(values):.1f}"


def report(result: dict) -> None:
    print("RESULT " + json.dumps(result, default=str), flush=True)
    if not result["redis"]:
        found = result.get("new_gcs_finds")
        print(f"without Redis, one GCS kill of {result['outage_s']:g} s: worker nodes "
              f"alive {result.get('worker_raylets_alive')} of {result.get('workers')}, "
              f"members running {result.get('members_running_after')} of "
              f"{result.get('members_running_before')} (60 s after: "
              f"{result.get('members_running_60s_after')}), scheduler answers: "
              f"{result.get('scheduler_answers')}; a new driver finds {found}")
        return
    print(f"{result.get('gangs')} gangs, 2 jobs, 1 elastic deployment; 3 GCS kills of "
          f"{result['outage_s']:g} s, then the head replaced")
    print(f"  lost {len(result.get('lost', []))}, leaked {len(result.get('leaked', []))}, "
          f"bodies run twice {len(result.get('bodies_twice', {}))}")
    print(f"  scheduler's process the same across the GCS kills: "
          f"{result.get('scheduler_same_process')}")
    # (recorded, admitted) after the return: one recorded before it was taken when the
    # GCS returned; one recorded after was refused by the store's timeout and made again
    times = [a for a in result.get("admitted_after_return_s", []) if a is not None]
    taken = [admitted for recorded, admitted in times if recorded < 0]
    again = [(recorded, admitted) for recorded, admitted in times if recorded >= 0]
    print(f"  {len(result.get('admitted_after_return_s', []))} submissions made during "
          f"outages: {len(taken)} taken when the GCS returned"
          + (f", admitted {_span(taken)} s after it" if taken else "")
          + f"; {len(again)} refused by the store's timeout and made again"
          + (f" ({_span([r for r, _ in again])} s after the return), admitted "
             f"{_span([a - r for r, a in again])} s after that" if again else ""))
    print(f"  Train run and jobs: {[(n, e[0], e[1]) for n, e in result.get('ends', {}).items() if n in ('train', 'queued', 'elastic')]}")
    print(f"  event loop during outages: {result.get('pings_during_outages')}")
    print(f"  head replaced: new head up in {result.get('head_up_s')} s, scheduler ready "
          f"{result.get('ready_after_head_up_s')} s after, recovery {result.get('recovery')}")


if __name__ == "__main__":
    sys.exit(main())
