"""A Serve application of elastic deployments with a ratio (issue 31, point 2), on Ray: it
grows and shrinks in whole steps of 2 prefill replicas and 1 decode replica, each
deployment on its own role's node, and never holds prefill surplus without decode's.
A restarted scheduler adopts it grown, and gives the step up as before.
The shared cluster has 8 GPUs (two workers of 4)."""

from __future__ import annotations

import urllib.request

import ray
from ray import serve

import raygang
from raygang import GangState
from raygang.runtime import serving
from tests.integration import leaks
from tests.integration.helpers import restart_scheduler, wait_state, wait_until


@serve.deployment(ray_actor_options={"num_cpus": 0, "num_gpus": 0.5},
                  graceful_shutdown_timeout_s=1)
class Prefill:
    def prefill(self, prompt: str) -> list[int]:
        return [ord(c) for c in prompt]


@serve.deployment(ray_actor_options={"num_cpus": 0, "num_gpus": 1}, graceful_shutdown_timeout_s=1)
class Decode:
    def __init__(self, prefill):
        self.prefill = prefill

    async def generate(self, prompt: str) -> str:
        return "".join(chr(t) for t in reversed(await self.prefill.prefill.remote(prompt)))


@serve.deployment(ray_actor_options={"num_cpus": 0}, graceful_shutdown_timeout_s=1)
class Router:
    def __init__(self, decode):
        self.decode = decode

    async def __call__(self, request) -> str:
        return await self.decode.generate.remote(request.query_params["prompt"])


@raygang.gang_task(replicas=4, num_gpus=1, num_cpus=0, strategy="STRICT_PACK")
class Hold:
    """Holds a whole worker's GPUs until cancelled."""


def _gpu_nodes(name: str) -> set[str]:
    """The nodes of the deployments that ask for GPUs (the router asks for none)."""
    running = _running(name)
    return set(running.get("Prefill", ())) | set(running.get("Decode", ()))


def _running(name: str) -> dict[str, list[str]]:
    """Each deployment's running replicas' nodes."""
    return {d: sorted(node for node, _ in replicas)
            for d, replicas in serving.deployment_replicas(name).items()}


def _sized(ref, prefill: int, decode: int, event: str):
    """Its status once raygang books `prefill` + `decode` replicas, Serve runs as many of
    each, and an event of the gang starts with `event`."""
    def there():
        s = ref.status()
        sizes = {r.role: r.size for r in s.roles}
        running = _running(ref.name)
        return (sizes == {"Prefill": prefill, "Decode": decode}
                and len(running.get("Prefill", ())) == prefill
                and len(running.get("Decode", ())) == decode
                and any(e.reason.startswith(event) for e in s.events) and s)
    try:
        return wait_until(there, timeout=120, poll_s=0.2)
    except AssertionError:
        s = ref.status()
        raise AssertionError((s.roles, _running(ref.name), [e.reason for e in s.events]))


def _ask(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/pd?prompt=gang", timeout=30) as r:
        return r.read().decode()


def test_an_application_grows_and_shrinks_in_whole_ratio_steps(ray_cluster, http_port):
    hold = pd = urgent = None
    try:
        hold = Hold.options(name="hold").remote()  # one worker, whole
        wait_state(hold, GangState.RUNNING)
        # Prefill 1..3 x 0.5 GPU and decode 1..2 x 1 GPU, 2 prefill to 1 decode: admitted
        # at 1 + 1 (1.5 GPUs) on the other worker, then one step (2 GPUs) there: 3.5 of 4.
        pd = raygang.deploy(
            "pd", Router.bind(Decode.bind(Prefill.bind())), priority="training",
            strategy="STRICT_PACK", ratio={"Prefill": 2, "Decode": 1},
            deployments={"Prefill": {"replicas": (1, 3)}, "Decode": {"replicas": (1, 2)}})
        pd.ready(timeout=120)
        status = _sized(pd, 3, 2, "grew to 5 members")
        assert {r.role: (r.min_size, r.max_size, r.step) for r in status.roles} == {
            "Prefill": (1, 3, 2), "Decode": (1, 2, 1)}
        assert all("at its maximum" in r.grow_reason for r in status.roles), status.roles
        [node] = _gpu_nodes("pd")
        assert _ask(http_port) == "gnag"

        # A restarted scheduler adopts it as it is, surplus step included: nothing started
        # again, the same replicas serving, and the step still its own to give up below.
        restart_scheduler()
        status = wait_until(lambda: (s := pd.status()).state is GangState.RUNNING and any(
            e.reason.startswith("adopted by the restarted scheduler") for e in s.events) and s,
            timeout=60)
        assert {r.role: r.size for r in status.roles} == {"Prefill": 3, "Decode": 2}, status
        assert status.restarts == 0 and status.preemptions == 0
        assert _gpu_nodes("pd") == {node} and _ask(http_port) == "gnag"

        # A more urgent deployment needs 2 GPUs on one node: the whole step goes (2 prefill
        # and 1 decode replicas), not the hold and not the application.
        urgent = raygang.deploy("urgent", Router.options(name="Urgent").bind(None),
                                replicas=2, num_gpus=1, num_cpus=0, strategy="STRICT_PACK",
                                priority=2000)
        urgent.ready(timeout=120)
        status = _sized(pd, 1, 1, "shrinking to 2 members")
        assert status.state is GangState.RUNNING and status.preemptions == 0
        assert hold.status().preemptions == 0
        assert _gpu_nodes("pd") == {node}
        assert _ask(http_port) == "gnag"  # it serves on at its minimum
        # It grows no further: the next step (2 GPUs) does not fit beside the urgent one
        reasons = {r.role: r.grow_reason or "" for r in pd.status().roles}
        assert "no room for a whole ratio step of 3 members" in reasons["Decode"] \
            or "no room for a whole ratio step of 3 members" in reasons["Prefill"], reasons
    finally:
        for name, ref in (("urgent", urgent), ("pd", pd)):
            if ref is not None:
                raygang.undeploy(name)
        if hold is not None:
            hold.cancel()
    assert leaks.serve_gang_pgs() == []
    wait_until(lambda: ray.available_resources().get("GPU", 0) == 8, timeout=30)
