"""A Serve application as a gang: its replicas start all at once, only on the chosen nodes."""

from __future__ import annotations

import asyncio
import json
import time
import urllib.request

import pytest
import ray
from ray import serve
from ray.util.placement_group import placement_group_table

from raygang.runtime import serving
from raygang.runtime.serving import ServeAppFailed
from tests.integration import leaks
from tests.integration.helpers import wait_until


# A short grace period: Serve waits it out even for replicas that never got placed (the
# default, 20 s, would make the failure test slow).
@serve.deployment(graceful_shutdown_timeout_s=2)
class WhereAmI:
    def __init__(self, greeting: str):
        self.greeting = greeting

    async def __call__(self, request):
        ctx = ray.get_runtime_context()
        return {"greeting": self.greeting, "node": ctx.get_node_id(),
                "replica": serve.get_replica_context().replica_id.unique_id,
                "gpus": ray.get_gpu_ids()}


where_am_i = WhereAmI.bind("hello")  # for the import-path form


def test_resolve_app_and_options_without_ray():
    assert serving.resolve_app(where_am_i) is where_am_i
    assert serving.resolve_app(f"{__name__}:where_am_i") is where_am_i
    with pytest.raises(TypeError, match="expected a Serve Application .* got int 42"):
        serving.resolve_app(42)
    with pytest.raises(ValueError, match="expected an import path 'pkg.module:attr'"):
        serving.resolve_app("no_colon_here")
    with pytest.raises(ValueError, match="cannot import"):
        serving.resolve_app("no_such_module_xyz:app")
    with pytest.raises(TypeError, match=r"is a Deployment, .*call \.bind\(\)"):
        serving.resolve_app(f"{__name__}:WhereAmI")

    options = serving.deployment_options(2, {"CPU": 1, "GPU": 1}, ["b", "a", "b"], "STRICT_PACK")
    assert options["placement_group_bundle_label_selector"] == [{"ray.io/node-id": "in(a,b)"}]
    assert options["gang_scheduling_config"] == {"gang_size": 2, "gang_placement_strategy": "PACK"}
    app = serving.with_options(where_am_i, options)  # Serve's own validators accept it
    deployment = app._bound_deployment
    assert deployment.num_replicas == 2 and deployment.init_args == ("hello",)
    assert deployment.ray_actor_options["num_gpus"] == 1
    assert where_am_i._bound_deployment.num_replicas == 1  # the original is unchanged
    # An elastic deployment: a group per replica (its count changes one at a time)
    elastic = serving.deployment_options(1, {"GPU": 1}, ["a"], "PACK", gang=False)
    assert elastic["gang_scheduling_config"] is None
    assert serving.with_options(where_am_i, elastic)._bound_deployment.num_replicas == 1


@serve.deployment(ray_actor_options={"num_cpus": 0, "num_gpus": 1})
class Prefill:
    pass


@serve.deployment(ray_actor_options={"num_cpus": 0.5, "num_gpus": 1, "runtime_env": {}},
                  placement_group_bundles=[{"CPU": 0.5, "GPU": 1}, {"GPU": 1}],
                  placement_group_strategy="STRICT_PACK")
class Decode:
    def __init__(self, prefill, again):
        pass


@serve.deployment(ray_actor_options={"num_cpus": 0})
class Router:
    def __init__(self, decode, spare=None):
        pass


def test_an_applications_graph_read_and_placed_without_ray():
    """Its deployments, named as Serve names them, with their own options; then each
    role's deployment on its nodes, bind args kept, the original app unchanged."""
    from ray.serve._private.build_app import build_app

    from raygang.core.workload_specs import deployment_spec
    from raygang.runtime import serve_graph

    prefill = Prefill.options(num_replicas=2).bind()
    app = Router.bind(Decode.bind(prefill, prefill), spare={"x": Prefill.bind()})
    graph = serve_graph.read(app)
    assert [(d.name, d.replicas, d.ingress) for d in graph] == [
        ("Prefill", 2, False), ("Decode", 1, False), ("Prefill_1", 1, False),
        ("Router", 1, True)]  # an app bound twice is one deployment; Serve's names
    assert graph[1].bundles == [{"CPU": 0.5, "GPU": 1}, {"GPU": 1}]
    assert graph[1].strategy == "STRICT_PACK" and graph[3].actor == {"CPU": 0}

    spec = deployment_spec("d", name="pd", deployments={"Prefill_1": {"resources": {"GPU": 2}}}
                           ).with_app(graph)
    gang = spec.gang_spec()
    assert [r.name for r in gang.roles] == ["Prefill", "Decode", "Prefill_1"]  # not Router
    nodes = ["n1", "n2", "n3", "n3"]  # Prefill-0, Prefill-1, Decode-0, Prefill_1-0
    built = build_app(serve_graph.placed(app, spec, gang, nodes), name="pd")
    assert [d.name for d in built.deployments] == ["Prefill", "Decode", "Prefill_1", "Router"]
    options = {d.name: (d.num_replicas, d._replica_config, d._deployment_config)
               for d in built.deployments}
    replicas, replica, config = options["Prefill"]  # one bundle a replica: Serve's gang
    assert replicas == 2 and replica.placement_group_bundles == [{"GPU": 1.0}]
    assert replica.placement_group_bundle_label_selector == [{"ray.io/node-id": "in(n1,n2)"}]
    assert config.gang_scheduling_config.gang_size == 2
    replicas, replica, config = options["Decode"]  # TP=2: a group per replica, its strategy
    assert replica.placement_group_bundles == [{"CPU": 0.5, "GPU": 1.0}, {"GPU": 1.0}]
    assert replica.placement_group_strategy == "STRICT_PACK"
    assert replica.placement_group_bundle_label_selector == [{"ray.io/node-id": "n3"}] * 2
    assert config.gang_scheduling_config is None
    assert replica.ray_actor_options == {"runtime_env": {}, "num_cpus": 0.5, "num_gpus": 1}
    assert options["Prefill_1"][1].ray_actor_options["num_gpus"] == 2  # given at deploy time
    assert options["Router"][1].placement_group_bundles is None  # asks for nothing: Serve's
    assert prefill._bound_deployment.num_replicas == 2  # the original is unchanged
    assert app._bound_deployment.init_args[0]._bound_deployment.init_args[0] is prefill


def _gpus_free() -> float:
    return ray.available_resources().get("GPU", 0.0)  # the key vanishes at 0


def _serve_gang_nodes() -> list[str]:
    """The nodes of the bundles of Serve's (only) gang placement group."""
    (pg,) = [pg for pg in placement_group_table().values()
             if pg["name"].startswith("SERVE_GANG::") and pg["state"] == "CREATED"]
    return [pg["bundles_to_node_id"][i] for i in sorted(pg["bundles_to_node_id"])]


def test_several_nodes_selector_and_a_gang_that_does_not_fit(
    ray_cluster, worker_node_ids, http_port
):
    """Nodes = head (0 GPUs) + one worker (4 GPUs), while the cluster has 8 GPUs: SPREAD
    would use the other worker too unless the in(head,worker) selector holds. 4 one-GPU
    replicas fit (all on that worker); 5 do not, so none may start."""
    head = next(n["NodeID"] for n in ray.nodes() if n["Alive"] and not n["Resources"].get("GPU"))
    nodes = [head, worker_node_ids[0]]
    gpus_before = _gpus_free()

    app = serving.with_options(
        where_am_i, serving.deployment_options(4, {"CPU": 1, "GPU": 1}, nodes, "SPREAD"))
    asyncio.run(serving.start_app("rg-fits", app, "/fits", timeout_s=120))
    try:
        assert serving.app_running("rg-fits")
        assert _serve_gang_nodes() == [worker_node_ids[0]] * 4
        assert _gpus_free() == gpus_before - 4
        replies = []
        for _ in range(20):
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/fits", timeout=30) as r:
                replies.append(json.loads(r.read()))
        assert {r["greeting"] for r in replies} == {"hello"}  # bind args kept
        assert {r["node"] for r in replies} == {worker_node_ids[0]}
        assert all(len(r["gpus"]) == 1 for r in replies)
        assert len({r["replica"] for r in replies}) >= 2  # the replicas answer, not one
    finally:
        asyncio.run(serving.delete_app("rg-fits"))
    assert not serving.app_running("rg-fits")
    # Serve removes its gang's group after the replicas stop (a CI run at load ~10 read
    # the GPUs a moment before they were back)
    wait_until(lambda: _gpus_free() == gpus_before and not leaks.serve_gang_pgs(), timeout=30)
    asyncio.run(serving.delete_app("rg-fits"))  # idempotent

    app = serving.with_options(
        where_am_i, serving.deployment_options(5, {"CPU": 1, "GPU": 1}, nodes, "SPREAD"))
    started = time.monotonic()
    with pytest.raises(ServeAppFailed, match="not RUNNING after 8s") as failure:
        asyncio.run(serving.start_app("rg-toobig", app, "/toobig", timeout_s=8))
    print(f"failed after {time.monotonic() - started:.1f}s: {failure.value}")
    assert _gpus_free() == gpus_before  # all-or-nothing: no replica took a GPU
    assert "rg-toobig" not in serve.status().applications
    assert not leaks.serve_gang_pgs()


@serve.deployment(graceful_shutdown_timeout_s=0.5)
class Echo:
    def __call__(self, request) -> str:
        return "ok"


# Moments of a start to cancel it at (s after it began): the deploy call (in a thread,
# ~0.1-0.3 s here) under way, and Serve placing the replica after it.
CANCEL_AT = (0.0, 0.01, 0.05, 0.15, 0.4)


def test_a_start_cancelled_at_any_moment_leaves_no_application(ray_cluster, worker_node_ids,
                                                                http_port):
    """A gang stopped while its app is being handed to Serve (undeployed, preempted, its
    scheduler shut down) cancels `start_app` mid-way: the deploy under way in its thread
    must not deploy an application after the cancellation has cleaned up (seen in the
    preemption bench: the app outlived its gang, holding a GPU, and the bench hung)."""
    gpus_before = _gpus_free()
    app = serving.with_options(Echo.bind(), serving.deployment_options(
        1, {"CPU": 0, "GPU": 1}, [worker_node_ids[0]], "PACK"))

    async def cancelled_at(name: str, delay: float) -> bool:
        """Start `name`, cancel it `delay` s in; whether the cancellation cut the start."""
        start = asyncio.ensure_future(serving.start_app(name, app, f"/{name}", 60))
        await asyncio.sleep(delay)
        start.cancel()
        try:
            await start
        except asyncio.CancelledError:
            return True
        await serving.delete_app(name)  # it ran before the cancellation came
        return False

    cut = [asyncio.run(cancelled_at(f"rg-cut-{i}", delay))
           for i, delay in enumerate(CANCEL_AT)]
    assert cut[0], "a start cancelled at once was not cut"
    time.sleep(1.0)  # a deploy that outlived its cancellation would show by now
    assert [n for n in serve.status().applications if n.startswith("rg-cut-")] == []
    assert not leaks.serve_gang_pgs() and _gpus_free() == gpus_before
