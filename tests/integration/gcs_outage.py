"""A GCS outage, then the head replaced, under a running scheduler, on a cluster of its own
with GCS fault tolerance (Debian's redis-server as the GCS store; the head takes no work
and runs the scheduler, as KubeRay runs it).

    python -m tests.integration.gcs_outage   # prints one JSON line (test_gcs_outage.py)

A gang runs, and another that ends early in the outage; the GCS is killed for OUTAGE_S;
meanwhile the scheduler's event loop is
pinged every 0.2 s from a thread, a second gang is submitted, and the scheduler is asked
what it sees; then the GCS is started again. Then the head is replaced (every process of
it killed, a new one started on the same port and Redis), with the first gang still
running: the scheduler restarts on the new head and recovers. Run in a subprocess: the test's own driver is
connected to the session's cluster, and this cluster's processes need RAY_REDIS_ADDRESS.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

from raygang.runtime.ports import free_port

OUTAGE_S = 9.0  # longer than the loop's read timeout (5 s), far below Ray's reconnect (60 s)
# Ray's timeout of a synchronous GCS call (placement group creation and removal, a named
# actor's lookup: `gcs_server_request_timeout_seconds`, 60 s by default; KubeRay sets 5 on
# a RayService's pods) lowered so that the outage outlasts it: those calls then raise
# instead of waiting the GCS out. Its reconnect timeout (`gcs_rpc_server_reconnect_timeout_s`,
# 60 s: past it Ray's processes exit) is left as it is, above the outage.
REQUEST_TIMEOUT_S = 3


def start_redis(namespace: str) -> subprocess.Popen:
    """Debian's redis-server on a port of its own, as the GCS's store of every Ray process
    this process starts from now on (`RAY_REDIS_ADDRESS`): GCS fault tolerance."""
    port = free_port()
    redis = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1",
                              "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    os.environ.update(RAY_REDIS_ADDRESS=f"127.0.0.1:{port}",
                      RAY_external_storage_namespace=f"{namespace}-{port}")
    return redis


def shut_down(cluster, redis: subprocess.Popen | None) -> None:
    """Everything a Redis-backed scenario started, stopped: raygang, this driver's Ray,
    the cluster, and Redis (None: none was started)."""
    import ray

    import raygang

    raygang.shutdown()
    ray.shutdown()
    cluster.shutdown()
    if redis is not None:
        redis.kill()


def new_head(cluster, head_args: dict, opened: str | None = None) -> float:
    """KubeRay's head pod deletion, locally: every process of the head killed, a new head
    started with `head_args` on the same GCS port (and Redis); this driver, whose raylet
    was the head's, connects again. Returns when the old head was killed (monotonic).
    `opened`: a file made while no head runs (a gate something waits on)."""
    import ray

    ray.shutdown()
    port = cluster.head_node._ray_params.gcs_server_port
    cluster.head_node.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
    cluster.head_node = None
    killed_at = time.monotonic()
    if opened is not None:
        open(opened, "w").close()
    cluster.add_node(**head_args | {"gcs_server_port": port}, wait=False)
    ray.init(address=cluster.address)
    return killed_at


def main() -> dict:
    redis = start_redis("raygang-test")
    os.environ["RAY_AUTH_MODE"] = "disabled"
    # Every process of the cluster (a replaced head's too) and this driver
    os.environ["RAY_gcs_server_request_timeout_seconds"] = str(REQUEST_TIMEOUT_S)
    import ray
    from ray.cluster_utils import Cluster

    import raygang
    from raygang.runtime.client.connection import scheduler

    cluster = Cluster(initialize_head=True, head_node_args=HEAD | {
        "gcs_server_port": free_port()})  # a replacement head takes the same port
    try:
        cluster.add_node(num_cpus=4, num_gpus=4)
        ray.init(address=cluster.address)
        cluster.wait_for_nodes()
        http = free_port()
        start_on_head(http)
        out = scenario(cluster, raygang, scheduler())
        out.update(replace_head(cluster, raygang, out["running_gang"], http))
        return out
    finally:
        shut_down(cluster, redis)


# The head takes no work, as KubeRay runs it, and runs the scheduler (`raygang start` on
# the head): a custom resource only the head has pins the scheduler actor there.
HEAD = {"num_cpus": 0, "num_gpus": 0, "resources": {"raygang-test-head": 1}}


def start_on_head(serve_http_port: int | None = None) -> None:
    import ray

    from raygang import SchedulerConfig
    from raygang.runtime.names import NAMESPACE, SCHEDULER_NAME
    from raygang.runtime.scheduler.actor import SchedulerActor

    handle = SchedulerActor.options(name=SCHEDULER_NAME, namespace=NAMESPACE,
                                    lifetime="detached",
                                    resources={"raygang-test-head": 0.01}).remote(
        SchedulerConfig(serve_http_port=serve_http_port))
    ray.get(handle.ping.remote(), timeout=60)


def serving(url: str, timeout: float) -> int:
    """The status of a GET of `url`, retried until 200 or `timeout` (0: failed to connect)."""
    import httpx

    deadline, status = time.monotonic() + timeout, 0
    while time.monotonic() < deadline:
        try:
            status = httpx.get(url, timeout=5).status_code
        except httpx.HTTPError:
            status = 0
        if status == 200:
            break
        time.sleep(0.5)
    return status


def replace_head(cluster, raygang, gang_id: str, http: int) -> dict:
    """KubeRay's head pod deletion, locally: every process of the head killed (its GCS,
    raylet and the scheduler actor on it), a new head started on the same GCS port with
    the same Redis; the scheduler is restarted by Ray there and recovers from its store."""
    import ray

    from raygang.runtime.client.connection import scheduler

    out: dict = {}
    running = raygang.GangRef(gang_id)
    # A deployment (its replica on the worker, Serve's controller on the head) goes too
    deployment = raygang.deploy("kept", "raygang.demo:echo", replicas=1, num_cpus=0.5)
    deployment.ready(timeout=120)
    # And two Ray Jobs (their supervisors and drivers on the job's worker node): one runs
    # until the test opens its gate, one ends while the head is away
    import tempfile

    files = tempfile.mkdtemp(prefix="rg-jobs-")
    job, ended = (raygang.submit_job(
        f"{sys.executable} -c \"import os, time\nopen('{files}/{name}.runs', 'a').write('run\\n')"
        f"\nwhile not os.path.exists('{files}/{name}.gate'):\n"
        f"    print('tick', flush=True); time.sleep(0.5)\"", gpus=1, name=name)
        for name in ("kept-job", "ended-job"))
    deadline = time.monotonic() + 120
    while "tick" not in job.logs() or "tick" not in ended.logs():
        assert time.monotonic() < deadline, (job.status(), ended.status())
        time.sleep(0.5)
    url = f"http://127.0.0.1:{http}/kept"
    out["serving_before_head"] = serving(url, 30)
    before = ray.get(scheduler().ping.remote(), timeout=10)["instance"]
    killed_at = new_head(cluster, HEAD, opened=f"{files}/ended-job.gate")
    out["head_up_after_s"] = round(time.monotonic() - killed_at, 1)
    deadline = time.monotonic() + 120
    while True:  # the Python API rides through the restart; ping until it has recovered
        try:
            ping = ray.get(scheduler().ping.remote(), timeout=10)
            if ping["ready"]:
                break
        except Exception:  # noqa: BLE001 - not restarted yet
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)
    out["ready_after_head_s"] = round(time.monotonic() - killed_at - out["head_up_after_s"], 1)
    out["scheduler_restarted"] = ping["instance"] != before
    out["recovery"] = {k: ping["recovery"][k] for k in ("adopted", "requeued", "pending")}
    out["recovery_s"] = ping["recovery"]["seconds"]  # of ready_after_head_s
    status = running.status()
    out["running_after_head"] = (status.state.value, status.restarts, status.preemptions,
                                 status.events[-1].reason)
    fresh = raygang.GangRef(_submit_one(raygang))
    out["fresh_after_head"] = fresh.wait(timeout=60).state.value
    status = deployment.status()
    out["deployment_after_head"] = (status.state.value, status.restarts,
                                    status.events[-1].reason)
    out["serving_after_head"] = serving(url, 60)
    status = job.status()
    out["job_after_head"] = (status.state.value, status.restarts, status.events[-1].reason)
    open(f"{files}/kept-job.gate", "w").close()
    for name, ref in (("kept-job", job), ("ended-job", ended)):
        status = ref.wait(timeout=120)
        out[f"{name}_end"] = (status.state.value, status.restarts,
                              [e.reason for e in status.events if "requeued" in e.reason],
                              open(f"{files}/{name}.runs").read().count("run"))
    out["undeployed"] = raygang.undeploy("kept").state.value
    running.cancel()
    deadline = time.monotonic() + 30
    while not running.status().finished and time.monotonic() < deadline:
        time.sleep(0.2)
    out["head_raygang_groups_left"] = sum(
        1 for pg in ray.util.placement_group_table().values()
        if pg["name"].startswith("raygang-") and pg["state"] != "REMOVED")
    return out


def _submit_one(raygang) -> str:
    @raygang.gang_task(num_gpus=1)
    def short() -> int:
        return 1

    return short.remote().gang_id


class Gated:
    """A member whose constructor returns once its gate file exists, which the test makes
    during the outage. The gang's next role starts once this one is ready, and Ray counts
    an actor alive (and delivers its first reply) only once the GCS has heard that its
    constructor returned: so the gang waits whole for the GCS, then comes up."""

    def __init__(self, gate: str):
        open(f"{gate}.entered", "w").close()  # its process runs: created, placed, alive
        while not os.path.exists(gate):
            time.sleep(0.05)

    def run(self) -> str:
        return "ran"


def scenario(cluster, raygang, handle) -> dict:
    import tempfile

    import ray

    @raygang.gang_task(replicas=2, num_gpus=1)
    def sleeper(seconds: float) -> float:
        time.sleep(seconds)
        return seconds

    out: dict = {}
    running = sleeper.remote(600)
    ending = sleeper.options(replicas=1).remote(4.0)  # ends early in the outage
    gate = os.path.join(tempfile.mkdtemp(prefix="rg-gate-"), "open")
    gated = raygang.gang_task(Gated, num_cpus=0.25)
    staged = raygang.gang("staged", roles={  # caught starting by the outage
        "first": gated.bind(gate), "second": gated.options(after=["first"]).bind(gate)}
    ).remote()
    finished = sleeper.options(replicas=1).remote(0.1)
    running.ready(timeout=120)
    ending.ready(timeout=120)
    finished.wait(timeout=120)
    deadline = time.monotonic() + 60
    while not os.path.exists(f"{gate}.entered"):  # its first member is in its constructor
        assert time.monotonic() < deadline, staged.status()
        time.sleep(0.1)
    pings: list[tuple[float, float | str]] = []
    stop = threading.Event()

    def pinger() -> None:
        while not stop.is_set():
            started = time.monotonic()
            try:
                ray.get(handle.ping.remote(), timeout=60)
                pings.append((started, time.monotonic() - started))
            except Exception as error:  # noqa: BLE001 - counted as a failed ping
                pings.append((started, type(error).__name__))
            time.sleep(0.2)

    threading.Thread(target=pinger, daemon=True).start()
    # What a teardown given up on in an outage leaves (its removal never answered): the
    # scheduler looks for such parts of gangs it knows once the GCS answers again, and
    # removes them; a `raygang-` name of no gang it knows it keeps
    given_up = ray.util.placement_group(
        [{"CPU": 0.1}], name=f"raygang-{finished.gang_id}-given-up-teardown")
    not_ours = ray.util.placement_group([{"CPU": 0.1}], name="raygang-of-no-known-gang")
    ray.get([given_up.ready(), not_ours.ready()], timeout=30)
    time.sleep(1.0)
    killed_at = time.monotonic()
    cluster.head_node.kill_gcs_server()
    submitted: dict = {}

    def submit() -> None:
        submitted["ref"] = sleeper.remote(1)
        submitted["returned_at"] = time.monotonic()

    threading.Thread(target=submit, daemon=True).start()
    created: dict = {}

    def create() -> None:  # shows the request timeout in force: it raises, not waits
        started = time.monotonic()
        try:
            created["group"] = ray.util.placement_group([{"CPU": 0.1}], name="request-timeout")
            created["outcome"] = "created"
        except Exception as error:  # noqa: BLE001 - what Ray raises is the finding
            created["outcome"] = type(error).__name__
        created["after_s"] = round(time.monotonic() - started, 1)

    threading.Thread(target=create, daemon=True).start()
    time.sleep(2.0)
    open(gate, "w").close()  # the staged gang's first member is ready (Ray hears it later)
    time.sleep(OUTAGE_S - 3.0)
    seen = ray.get(handle.ping.remote(), timeout=10)
    out["unreachable_during"] = seen["unreachable"]
    out["scheduler_request_timeout"] = ray.get(handle.__ray_call__.remote(
        lambda actor: os.environ.get("RAY_gcs_server_request_timeout_seconds")), timeout=10)
    out["create_during_outage"] = dict(created)
    out["running_during"] = ray.get(handle.status.remote(running.gang_id), timeout=10).state.value
    time.sleep(1.0)
    cluster.head_node.start_gcs_server()
    back_at = time.monotonic()
    deadline = back_at + 60
    while "ref" not in submitted and time.monotonic() < deadline:
        time.sleep(0.1)
    out["submission_returned_after_s"] = round(submitted["returned_at"] - back_at, 2)
    second = submitted["ref"].wait(timeout=60)
    out["second"] = second.state.value
    back_wall = time.time() - (time.monotonic() - back_at)  # events: the scheduler's clock
    for state in ("ADMITTED", "RUNNING"):
        at = next(e.at for e in second.events if e.to_state.value == state)
        out[f"second_{state.lower()}_after_s"] = round(at - back_wall, 2)
    stop.set()
    during = [d for t, d in pings if killed_at <= t <= back_at]
    out["pings_during"] = len(during)
    out["longest_ping_during_s"] = max((d for d in during if isinstance(d, float)), default=None)
    out["failed_pings"] = sum(1 for d in during if isinstance(d, str))
    deadline = time.monotonic() + 30
    while not ending.status().finished and time.monotonic() < deadline:
        time.sleep(0.2)
    out["ending"] = ending.status().state.value
    status = staged.wait(timeout=60)
    out["staged"] = (status.state.value, status.restarts)
    out["staged_ready_after_back_s"] = {f"{m.role}": round(m.ready_at - back_wall, 2)
                                        for m in status.members}
    status = running.status()
    out["running_after"] = (status.state.value, status.restarts, status.preemptions)
    ping = ray.get(handle.ping.remote(), timeout=10)
    out["unreachable_after"] = ping["unreachable"]
    out["after_outage"] = ping["after_outage"]
    out["given_up_group"] = ray.util.placement_group_table(given_up)["state"]
    out["not_ours_group"] = ray.util.placement_group_table(not_ours)["state"]
    ray.util.remove_placement_group(not_ours)
    if "group" in created:
        ray.util.remove_placement_group(created["group"])
    out["running_gang"] = running.gang_id
    return out  # the running gang goes on into the head's replacement


if __name__ == "__main__":
    print(json.dumps(main()), flush=True)
    sys.exit(0)
