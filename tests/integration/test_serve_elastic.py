"""An elastic Serve deployment (`replicas=(min, max)`) on Ray: admitted at its minimum,
grown on its node as GPUs free, shrunk to its minimum for a more urgent deployment instead
of being removed, and grown back when that one goes; the replicas it keeps serve
throughout. The shared cluster has 8 GPUs (two workers of 4)."""

from __future__ import annotations

import json
import urllib.request

import ray
from ray import serve

import raygang
from raygang import GangState
from raygang.runtime import serving
from tests.integration import leaks
from tests.integration.helpers import wait_state, wait_until


@serve.deployment(graceful_shutdown_timeout_s=1)
class Replica:
    async def __call__(self, request):
        return {"node": ray.get_runtime_context().get_node_id(),
                "replica": serve.get_replica_context().replica_id.unique_id}


@raygang.gang_task(replicas=4, num_gpus=1, num_cpus=0, strategy="STRICT_PACK")
class Hold:
    """Holds a whole worker's GPUs until cancelled."""


def _replicas(name: str) -> dict[str, str]:
    """Serve's running replicas of the app's ingress deployment: id -> node."""
    [deployment] = serving.serve_details()["applications"][name]["deployments"].values()
    return {r["replica_id"]: r["node_id"] for r in deployment["replicas"]
            if str(r["state"]).endswith("RUNNING")}


def _size(ref, n: int, event: str = ""):
    """Its status once raygang books `n` replicas, Serve runs that many and an event of
    the gang starts with `event`."""
    def there():
        s = ref.status()
        return (s.world_size == n and len(_replicas(ref.name)) == n
                and any(e.reason.startswith(event) for e in s.events) and s)
    try:
        return wait_until(there, timeout=90, poll_s=0.2)
    except AssertionError:
        s = ref.status()
        raise AssertionError((s.world_size, _replicas(ref.name), [e.reason for e in s.events]))


def _answers(port: int, path: str, n: int = 6) -> set[str]:
    out = set()
    for _ in range(n):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as r:
            out.add(json.loads(r.read())["replica"])
    return out


def test_an_elastic_deployment_shrinks_for_a_more_urgent_one_and_grows_back(ray_cluster,
                                                                             http_port):
    hold = chat = urgent = None
    try:
        # 1..3 replicas of 1 GPU, all on one node: admitted at 1, grown to 3 there.
        chat = raygang.deploy("chat", Replica.bind(), replicas=(1, 3), num_gpus=1,
                              num_cpus=0, strategy="STRICT_PACK")
        chat.ready(timeout=120)
        status = _size(chat, 3, "grew to 3 members (added replica-1, replica-2)")
        assert status.state is GangState.RUNNING
        first = set(_replicas("chat"))
        [node] = set(_replicas("chat").values())
        hold = Hold.options(name="hold").remote()  # the other worker, whole
        wait_state(hold, GangState.RUNNING)

        # A deployment of higher priority needs 3 GPUs on one node: the chat's surplus
        # goes (2 replicas stop, Serve drains them), no whole gang is preempted.
        urgent = raygang.deploy("urgent", Replica.bind(), replicas=3, num_gpus=1,
                                num_cpus=0, strategy="STRICT_PACK", priority=2000)
        assert urgent.ready(timeout=120).state is GangState.RUNNING
        status = _size(chat, 1, "shrinking to 1 members (removing replica-")
        assert status.state is GangState.RUNNING and status.preemptions == 0
        assert hold.status().state is GangState.RUNNING and hold.status().preemptions == 0
        kept = set(_replicas("chat"))
        assert kept < first  # the replica left is one that served all along
        assert set(_replicas("urgent").values()) == {node}
        assert _answers(http_port, "/chat") == kept

        # The urgent one goes: the chat grows back to 3 on its node, its replica untouched.
        raygang.undeploy("urgent")
        urgent = None
        _size(chat, 3, "grew to 3 members (added replica-")
        assert kept < set(_replicas("chat")) and set(_replicas("chat").values()) == {node}
        assert kept <= _answers(http_port, "/chat", 12)
    finally:
        for name, ref in (("urgent", urgent), ("chat", chat)):
            if ref is not None:
                raygang.undeploy(name)
        if hold is not None:
            hold.cancel()
    assert leaks.serve_gang_pgs() == []
