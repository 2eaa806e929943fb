"""A worker node cut off from the network while its processes keep running, then
reconnected, under a running scheduler (issue: survive the head, point 3).

    python -m tests.integration.node_cutoff   # prints one JSON line (test_node_cutoff.py)

The node runs in a network namespace of this script's own, joined to the host by a veth
pair on addresses the script makes (Debian's iproute2): taking the host's end of the pair
down cuts the node off as a pulled cable would, with its raylet and the gangs' members
still running inside. The head (scheduler, GCS) and a second worker stay on the host.

Two gangs run on the namespaced node, one plain and one with a fence (`fence_s`); their
members write a line to a file every TICK_S, from whichever process runs them, until told
to finish. The node is cut off: each gang must be torn down whole and run again on the
other worker. Then the node is reconnected, and nothing of a first attempt may go on
beside the second: the plain gang's old members end as soon as the network returns (the
member fence: member/fence.py), the fenced gang's had ended before its new attempt began;
and only the new attempts finish their bodies.

Where network namespaces cannot be made (not root, no iproute2, no kernel support), the
script prints {"skip": why}: the test then skips and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


TICK_S = 0.25
FENCE_S = 4.0  # the fenced gang's fence_s
RETURN_SETTLE_S = 10.0  # after the return: Ray's raylet there exits within ~3.4 s, the
# fenced members within ~0.2 s (cuts of 11 and 36 s here), 5.1 s seen on a loaded machine
# Ray notices a silent node by its missed health checks: 1 s apart, 3 missed, a 1 s
# timeout each (Ray's defaults are 3 s, 5 and 10 s: ~25 s to notice). Set for every
# process of this cluster only.
HEALTH = {"RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
          "RAY_health_check_timeout_ms": "1000", "RAY_health_check_initial_delay_ms": "1000"}


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=30)


class Namespace:
    """A network namespace joined to the host by a veth pair on a /30 of the script's own."""

    def __init__(self) -> None:
        tag = os.getpid() % 10_000
        self.name = f"rgcut{tag}"
        self.host_end, self.node_end = f"rgh{tag}", f"rgn{tag}"
        octet = 1 + os.getpid() % 250
        self.host_ip, self.node_ip = f"10.213.{octet}.1", f"10.213.{octet}.2"
        self.made = False

    def make(self) -> None:
        sh("ip", "netns", "add", self.name)
        self.made = True
        sh("ip", "link", "add", self.host_end, "type", "veth", "peer", "name", self.node_end)
        sh("ip", "link", "set", self.node_end, "netns", self.name)
        sh("ip", "addr", "add", f"{self.host_ip}/30", "dev", self.host_end)
        sh("ip", "link", "set", self.host_end, "up")
        inside = ("ip", "netns", "exec", self.name)
        sh(*inside, "ip", "addr", "add", f"{self.node_ip}/30", "dev", self.node_end)
        sh(*inside, "ip", "link", "set", self.node_end, "up")
        sh(*inside, "ip", "link", "set", "lo", "up")

    def cut(self) -> None:
        sh("ip", "link", "set", self.host_end, "down")

    def reconnect(self) -> None:
        sh("ip", "link", "set", self.host_end, "up")

    def pids(self) -> list[int]:
        out = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True,
                             text=True, timeout=30).stdout
        return [int(p) for p in out.split()]

    def remove(self) -> None:
        if not self.made:
            return
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        subprocess.run(["ip", "link", "del", self.host_end], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True, timeout=30)


def why_no_namespace() -> str | None:
    if shutil.which("ip") is None:
        return "iproute2's `ip` is not installed"
    if os.geteuid() != 0:
        return "network namespaces need root"
    return None


def main() -> dict:
    why = why_no_namespace()
    if why:
        return {"skip": why}
    ns = Namespace()
    try:
        ns.make()
    except subprocess.CalledProcessError as error:
        ns.remove()
        return {"skip": f"could not make a network namespace: {error.stderr.strip()}"}
    os.environ.update(HEALTH, RAY_AUTH_MODE="disabled")
    import ray
    from ray.cluster_utils import Cluster

    import raygang
    from tests.integration.gcs_outage import HEAD, start_on_head

    files = Path(tempfile.mkdtemp(prefix="rg-cutoff-"))
    cluster = Cluster(initialize_head=True, head_node_args=HEAD | {
        "node_ip_address": ns.host_ip})
    try:
        ray.init(address=cluster.address, _node_ip_address=ns.host_ip)
        start_on_head()
        node = subprocess.run(
            ["ip", "netns", "exec", ns.name, sys.executable, "-m", "ray.scripts.scripts",
             "start", f"--address={cluster.address}", f"--node-ip-address={ns.node_ip}",
             "--num-cpus=2", "--num-gpus=4", "--disable-usage-stats"],
            env=os.environ | {"RAY_ADDRESS": ""}, capture_output=True, text=True, timeout=120)
        assert node.returncode == 0, node.stderr[-3000:]
        wait_for_alive(2)
        return scenario(cluster, ns, raygang, files)
    finally:
        raygang.shutdown()
        ray.shutdown()
        ns.remove()
        cluster.shutdown()


def wait_for_alive(count: int, timeout: float = 60) -> None:
    import ray

    deadline = time.monotonic() + timeout
    while sum(1 for n in ray.nodes() if n["Alive"]) < count:
        assert time.monotonic() < deadline, f"fewer than {count} nodes alive: {ray.nodes()}"
        time.sleep(0.2)


def scenario(cluster, ns: Namespace, raygang, files: Path) -> dict:
    import ray

    @raygang.gang_task(replicas=2, num_gpus=1, strategy="STRICT_PACK", max_restarts=1)
    def ticker(ticks: str, finish: str) -> str:
        """Tick until told to finish, then say so: from whichever process runs it."""
        node = ray.get_runtime_context().get_node_id()
        while not os.path.exists(finish):
            with open(ticks, "a") as out:
                out.write(f"tick {node} {time.time()}\n")
            time.sleep(TICK_S)
        with open(ticks, "a") as out:
            out.write(f"done {node} {time.time()}\n")
        return node

    finish = str(files / "finish")
    refs = {"plain": ticker.options(name="plain").remote(str(files / "plain"), finish),
            "fenced": ticker.options(name="fenced", fence_s=FENCE_S).remote(
                str(files / "fenced"), finish)}
    out: dict = {name: {} for name in refs}
    for name, ref in refs.items():
        out[name]["first_nodes"] = sorted({m.node_id for m in ref.ready(timeout=120).members})
    (cut_node,) = set(out["plain"]["first_nodes"]) | set(out["fenced"]["first_nodes"])
    cluster.add_node(num_cpus=2, num_gpus=4, node_ip_address=ns.host_ip)  # room elsewhere
    wait_for_alive(3)
    ns.cut()
    cut_at = time.time()
    for name, ref in refs.items():
        deadline = time.monotonic() + 90
        while ref.status().restarts < 1:
            assert time.monotonic() < deadline, ref.status()
            time.sleep(0.1)
        again = ref.ready(timeout=90)  # waits for the new attempt (not the lost one)
        out[name]["running_again_after_cut_s"] = round(
            next(e.at for e in reversed(again.events) if e.to_state.value == "RUNNING")
            - cut_at, 1)
        out[name]["second_nodes"] = sorted({m.node_id for m in again.members})
        out[name]["requeued"] = next(e.reason for e in reversed(again.events)
                                     if e.to_state.value == "PENDING")
    time.sleep(1.0)
    ns.reconnect()
    back_at = time.time()
    time.sleep(RETURN_SETTLE_S)  # what the cut-off node still runs, it runs by now
    out["namespace_processes_after_return"] = [
        Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()[:300]
        for pid in ns.pids() if Path(f"/proc/{pid}").exists()]
    Path(finish).touch()
    for name, ref in refs.items():
        done = ref.wait(timeout=60)
        seen = out[name]
        seen.update(state=done.state.value, restarts=done.restarts)
        lines = [line.split() for line in (files / name).read_text().splitlines()]
        old = [float(at) for kind, node, at in lines if node == cut_node]
        new = [float(at) for kind, node, at in lines if node != cut_node]
        seen["old_last_tick_after_cut_s"] = round(max(old) - cut_at, 2)
        seen["new_first_tick_after_cut_s"] = round(min(new) - cut_at, 2)
        seen["old_ticks_after_return_s"] = round(max(old) - back_at, 2) if max(old) > back_at \
            else None
        seen["done_by"] = sorted("old" if node == cut_node else "new"
                                 for kind, node, _ in lines if kind == "done")
    out["cut_to_return_s"] = round(back_at - cut_at, 1)
    deadline = time.monotonic() + 30
    left = None
    while time.monotonic() < deadline:
        left = [pg["name"] for pg in ray.util.placement_group_table().values()
                if pg["name"].startswith("raygang-") and pg["state"] != "REMOVED"]
        if not left:
            break
        time.sleep(0.2)
    out["groups_left"] = left
    return out


if __name__ == "__main__":
    print(json.dumps(main()), flush=True)
    sys.exit(0)
