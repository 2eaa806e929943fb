"""Chaos soak, on a Ray cluster of its own (run as `python -m tests.e2e.chaos_scenario`;
tests/e2e/test_chaos.py parses the JSON line it prints).

A stream of small gangs (2 members, a few seconds each, up to 3 whole restarts) while,
every few seconds, one fault in turn: kill a random member actor, kill the scheduler actor
(Ray restarts it), remove a worker node and add a fresh one, or cancel a random gang; and,
where Debian's redis-server is installed (the GCS then keeps its state in Redis, as with
KubeRay's GCS fault tolerance), kill the GCS for GCS_DOWN_S and start it again, and replace
the head (every process of it killed, a new one started on the same port: KubeRay's head
pod deletion). Gangs arrive until every kind of fault has come. At the end every submitted
gang must be SUCCEEDED, FAILED with a reason, or CANCELLED; none lost, none listed twice;
and nothing left: no raygang placement group or member actor, every CPU and chaos slot
free again.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from collections import Counter

from raygang.runtime.ports import free_port

CHAOS = "chaos"  # the resource the gangs use: only the worker nodes have it
GCS_DOWN_S = 4.0
# Once gangs stop arriving, how long the soak waits for them all to end: a gang not ended
# by then is reported (its last events) rather than waited for without end
END_WAIT_S = 150.0


def in_the_gcs(gang_id: str) -> list[str]:
    """What the GCS has of a gang's parts (its members' and its group's states), to tell a
    start the cluster lost from one the scheduler forgot."""
    import ray
    from ray.util.placement_group import placement_group_table

    prefix = f"raygang-{gang_id}"
    try:
        actors = ray._private.state.state.actor_table(None)  # every actor, dead ones too
        parts = [f"{a.get('Name')}: {a.get('State')} pid={a.get('Pid')}"
                 for a in actors.values() if str(a.get("Name", "")).startswith(prefix)]
        parts += [f"{g['name']}: {g['state']}" for g in placement_group_table().values()
                  if g["name"].startswith(prefix)]
        return parts
    except Exception as error:  # noqa: BLE001 - a report, never a second failure
        return [f"could not read: {error!r}"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=90.0, help="how long gangs arrive")
    parser.add_argument("--gangs", type=int, default=0,
                        help="at least this many gangs arrive (for up to 3x --seconds): on a "
                             "loaded machine a submission waits out each scheduler restart")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--every", default="2,5", metavar="LOW,HIGH",
                        help="seconds between faults, drawn uniformly from LOW to HIGH")
    args = parser.parse_args(argv)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")

    import ray
    from ray.cluster_utils import Cluster

    import raygang
    from raygang import demo
    from raygang.runtime.names import NAMESPACE, SCHEDULER_NAME
    from tests.integration import leaks
    from tests.integration.gcs_outage import new_head, shut_down, start_redis

    rng = random.Random(args.seed)
    low, high = (float(s) for s in args.every.split(","))
    # With Redis (absent: the soak kills neither the GCS nor the head)
    redis = start_redis("raygang-chaos") if shutil.which("redis-server") else None
    head_args = {"num_cpus": 2, "num_gpus": 0, "include_dashboard": False}
    cluster = Cluster(initialize_head=True, head_node_args=head_args | {
        "gcs_server_port": free_port()})  # a replacement head takes the same port
    workers = [cluster.add_node(num_cpus=2, resources={CHAOS: 4}) for _ in range(2)]
    ray.init(address=cluster.address)
    cluster.wait_for_nodes()
    raygang.start(raygang.SchedulerConfig(restart_backoff_s=0.5, restart_backoff_max_s=4.0))
    task = raygang.gang_task(demo.sleep, name="soak", replicas=2, num_cpus=0,
                             resources={CHAOS: 1}, max_restarts=3)
    refs: list = []
    actions: Counter = Counter()
    errors: list[str] = []
    # Every kind of fault, in turns (members twice as often), at random moments. Done from
    # this thread: Ray's Cluster.add_node works only from the main thread.
    kinds = ["member", "scheduler", "member", "node", "cancel"]
    if redis is not None:  # the GCS and the head can die and come back only with Redis
        kinds[2:2] = ["gcs"]
        kinds.append("head")

    def chaos(what: str) -> None:
        try:
            if what == "member":
                names = [a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
                         if a["name"].startswith("raygang-") and a["name"] != SCHEDULER_NAME]
                if not names:
                    return
                ray.kill(ray.get_actor(rng.choice(names), namespace=NAMESPACE))
            elif what == "scheduler":
                ray.kill(ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE), no_restart=False)
            elif what == "node":
                victim = rng.choice(workers)
                cluster.remove_node(victim, allow_graceful=False)
                workers.remove(victim)
                workers.append(cluster.add_node(num_cpus=2, resources={CHAOS: 4}))
            elif what == "gcs":  # no submission meanwhile: this thread submits
                cluster.head_node.kill_gcs_server()
                time.sleep(GCS_DOWN_S)
                cluster.head_node.start_gcs_server()
            elif what == "head":
                new_head(cluster, head_args)
            elif refs:
                rng.choice(refs).cancel()
            actions[what] += 1
        except Exception as error:  # a target that vanished meanwhile: note it
            errors.append(f"{what}: {type(error).__name__}: {error}")

    t0 = time.monotonic()
    next_chaos = t0 + rng.uniform(low, high)
    try:
        def arriving() -> bool:
            elapsed = time.monotonic() - t0
            short = len(refs) < args.gangs or set(kinds) - set(actions)
            # On a slow machine each fault takes longer (a node's start, the GCS's): the
            # gangs and the kinds of fault still all come, within 8 x `seconds`
            return elapsed < args.seconds or (bool(short) and elapsed < 8 * args.seconds)

        while arriving():
            if time.monotonic() >= next_chaos:
                chaos(kinds[sum(actions.values()) % len(kinds)])
                next_chaos = time.monotonic() + rng.uniform(low, high)
            refs.append(task.remote(seconds=rng.uniform(1.0, 4.0)))
            time.sleep(rng.uniform(0.5, 2.0))
        ends = Counter()
        failed_without_reason = []
        stuck = []  # gangs still unfinished at the end: their stories, to read
        ending_by = time.monotonic() + END_WAIT_S
        for ref in refs:
            try:
                status = ref.wait(timeout=max(1.0, ending_by - time.monotonic()))
            except TimeoutError:
                status = ref.status()
                stuck.append([status.gang_id, status.state.value, [
                    f"{e.to_state.value}: {e.reason}" for e in status.events][-6:],
                    in_the_gcs(status.gang_id)])
            ends[status.state.value] += 1
            if status.state.value == "FAILED" and (status.error is None or not status.reason):
                failed_without_reason.append(ref.gang_id)
        listed = Counter(g.gang_id for g in raygang.list_gangs())
        submitted = [r.gang_id for r in refs]
        deadline = time.monotonic() + 60
        while True:  # the last teardowns settle
            left = leaks.raygang_placement_groups() or leaks.raygang_member_actors()
            total, free = ray.cluster_resources(), ray.available_resources()
            short = {k: (free.get(k, 0), v) for k, v in total.items()
                     if k in ("CPU", CHAOS) and free.get(k, 0) != v}
            if (not left and not short) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        result = {
            "submitted": len(submitted), "ends": dict(ends), "actions": dict(actions),
            "lost": [g for g in submitted if listed[g] == 0],
            "duplicated": [g for g, n in listed.items() if n > 1],
            "unfinished": sum(n for s, n in ends.items()
                              if s not in ("SUCCEEDED", "FAILED", "CANCELLED")),
            "failed_without_reason": failed_without_reason,
            "leaked": [str(x) for x in left] if left else [], "short": short,
            "restarts": sum(r.status().restarts for r in refs),
            # starts the cluster lost in a GCS fault, given up and made again (control/outage)
            "lost_starts": sum("lost the start" in (e.reason or "")
                               for r in refs for e in r.status().events),
            "chaos_errors": errors[:10], "seconds": round(time.monotonic() - t0, 1),
            "stuck": stuck,
        }
    finally:
        shut_down(cluster, redis)
    result["redis"] = redis is not None
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
