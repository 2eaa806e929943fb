"""The Serve side of a "deployment" gang: hand the nodes raygang chose to Ray Serve.

raygang picks the nodes for an application's replicas (one bundle per replica); Serve then
runs them. The replicas must start all at once and only on those nodes, so the ingress
deployment gets Serve's gang scheduling (one placement group for the whole gang: nothing
is held unless every replica fits) with a node-id label selector on every bundle.

The async functions are called from the scheduler's event loop: every blocking Serve call
(they poll the controller with `ray.get` and `time.sleep`) runs in a thread.
Importing this module imports `ray.serve` (~0.7 s); import it lazily where that matters.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

from ray import serve
from ray.exceptions import RayActorError
from ray.serve import Application
from ray.serve.exceptions import RayServeException

from raygang.control.tasks import run_to_completion
from raygang.core.resources import Resources
from raygang.runtime.names import node_selector
from raygang.runtime.placement import actor_resource_options
from raygang.runtime.ports import free_port
from raygang.runtime.ray_private import (
    import_attr,  # as Serve resolves `import_path`
    serve_details,
    serve_forget_controller,
    serve_ingress_deployment,
    serve_run_without_waiting,
    serve_set_replicas,
)

DEFAULT_HTTP_PORT = 8000
# Serve builds a deployment's config with a switch that is global to the process
# (cloudpickle's "pickle this module by value": register, dump, unregister). Two builds in
# two threads at once unregister each other's module, and one of them fails ("<module
# ...request_router> is not registered for pickle by value": two deploys at once failed
# so). The scheduler actor builds in threads (reading an app's graph, placing it, `serve.run`),
# each under this lock.
BUILDING = threading.RLock()
POLL_S = 0.25
# Resource requests a user may have put in the deployment's ray_actor_options: replaced,
# because the replica must ask exactly for its bundle to be placed in it.
RESOURCE_KEYS = ("num_cpus", "num_gpus", "memory", "resources", "accelerator_type")
# raygang strategy -> Serve's gang placement strategy (Serve has no strict variants; the
# node selector, not the strategy, is what keeps replicas on the chosen nodes).
_GANG_STRATEGY = {"STRICT_PACK": "PACK", "PACK": "PACK", "SPREAD": "SPREAD",
                  "STRICT_SPREAD": "SPREAD"}


class ServeAppFailed(Exception):
    """The application did not reach RUNNING; the message is Serve's own explanation."""


def resolve_app(app: Any) -> Application:
    """An `Application` (`Deployment.bind(...)`), or one named by "pkg.module:attr"."""
    if isinstance(app, Application):
        return app
    if not isinstance(app, str):
        raise TypeError(
            f"app: expected a Serve Application (MyDeployment.bind(...)) or an import path "
            f"'pkg.module:attr', got {type(app).__name__} {app!r}"
        )
    if ":" not in app or not all(app.split(":", 1)):
        raise ValueError(f"app: expected an import path 'pkg.module:attr', got {app!r}")
    try:
        target = import_attr(app)
    except (ImportError, AttributeError) as e:
        raise ValueError(f"app: cannot import {app!r}: {e}") from e
    if not isinstance(target, Application):
        hint = " (call .bind() on the deployment)" if isinstance(target, serve.Deployment) else ""
        raise TypeError(
            f"app: {app!r} is a {type(target).__name__}, expected a Serve Application{hint}"
        )
    return target


def deployment_options(
    replicas: int, bundle: Mapping[str, float], nodes: Sequence[str], strategy: str,
    gang: bool = True,
) -> dict[str, Any]:
    """Serve options: exactly `replicas` replicas of `bundle`, all or none, on `nodes` only.

    With `gang_scheduling_config` Serve reserves one placement group of `gang_size` copies
    of the replica's bundles before it starts any replica, and copies the bundle label
    selector onto each copy, so the selector confines every replica to `nodes`.
    Autoscaling, `max_replicas_per_node` and `placement_group_strategy` are cleared: the
    first would change the count, Serve rejects the other two together with a gang.
    Without `gang` (an elastic deployment: Serve wants the count a multiple of the gang
    size, and raygang changes it one replica at a time) each replica has a group of its
    own, under the same selector; raygang's holds made the minimum all or nothing.
    """
    if replicas < 1:
        raise ValueError(f"replicas: expected at least 1, got {replicas}")
    name = str(getattr(strategy, "value", strategy))
    if name not in _GANG_STRATEGY:
        raise ValueError(f"strategy: expected one of {sorted(_GANG_STRATEGY)}, got {name!r}")
    resources = Resources(bundle)
    return {
        "num_replicas": replicas,
        "autoscaling_config": None,
        "max_replicas_per_node": None,
        "placement_group_strategy": None,
        "ray_actor_options": actor_resource_options(resources),
        "placement_group_bundles": [resources.to_dict()],
        "placement_group_bundle_label_selector": [node_selector(nodes)],
        "gang_scheduling_config": {
            "gang_size": replicas,
            "gang_placement_strategy": _GANG_STRATEGY[name],
        } if gang else None,
    }


def with_options(app: Application, options: Mapping[str, Any]) -> Application:
    """A copy of `app` whose ingress deployment has `options`; bind args are kept.

    `Deployment.options()` keeps the bound init args and returns a new deployment, so
    `app` itself is left unchanged. Non-resource `ray_actor_options` (runtime_env, ...) of
    the user's deployment are kept.
    """
    deployment = serve_ingress_deployment(resolve_app(app))
    options = dict(options)
    if "ray_actor_options" in options:
        kept = {k: v for k, v in (deployment.ray_actor_options or {}).items()
                if k not in RESOURCE_KEYS}
        options["ray_actor_options"] = {**kept, **options["ray_actor_options"]}
    return Application(deployment.options(**options))


def ensure_serve_started(http_port: int | None = None, host: str = "127.0.0.1") -> None:
    """Start Serve unless it runs; safe to call any number of times (blocking).

    One proxy on the head bound to loopback: on a local multi-node test cluster every node
    has the same IP, so Serve's default proxy-on-every-node fails to bind the port.
    A running Serve keeps its HTTP options (they cannot change without a restart); with
    `http_port=None` it is not even asked, so that Serve logs no "config differs" warning.
    `host="0.0.0.0"` exposes it beyond this machine (the raygang API on KubeRay's head).
    """
    status = _serve_status()  # also drops a cached handle to a controller that is gone
    if http_port is None and status.proxies:  # an empty status: Serve not running
        return
    serve.start(
        proxy_location="HeadOnly",
        http_options={"host": host, "port": http_port or DEFAULT_HTTP_PORT},
    )


def serve_on_a_free_port(tries: int = 3) -> int:
    """Start Serve (as `ensure_serve_started`) with its proxy on a loopback port free when
    asked; the port. Another process may bind that port before the proxy does (seen with
    the test suite's two workers starting Serve at once): then Serve goes down and another
    port is tried. For benchmarks and tests beside other Serve instances on one machine."""
    for attempt in range(tries):
        port = free_port()
        try:
            ensure_serve_started(port)
            return port
        except Exception as error:  # only a lost port is tried again
            if "Failed to bind" not in str(error) or attempt == tries - 1:
                raise
            serve.shutdown()
    raise AssertionError("unreachable")


def _serve_status():
    """`serve.status()`, surviving a Serve that was shut down and started again meanwhile.

    Serve caches its controller's handle per process and job; the scheduler's job never
    changes, so after someone else's `serve.shutdown()` the cached handle points at a dead
    controller and every Serve call raises RayActorError. Drop it and ask again: Serve then
    finds the current controller by name (or reports Serve as not running).
    """
    try:
        return serve.status()
    except RayActorError:
        serve_forget_controller()
        return serve.status()


def _app_status(name: str):
    """Serve's status of application `name`, or None if Serve has no such application."""
    return _serve_status().applications.get(name)


def app_running(name: str) -> bool:
    status = _app_status(name)
    return status is not None and status.status == "RUNNING"


def app_lost(name: str) -> str | None:
    """Why a deployed application is gone for good (deleted by someone else, or failed to
    deploy), or None while it exists. Transient states (a replica restarting: DEPLOYING,
    UNHEALTHY) are Serve's to heal and do not count."""
    status = _app_status(name)
    if status is None:
        return f"Serve application {name!r} was deleted outside raygang"
    if _name(status.status) == "DEPLOY_FAILED":
        return f"Serve application {name!r} failed: {_explain(status)}"
    return None


def _name(enum_or_str: Any) -> str:
    return str(getattr(enum_or_str, "value", enum_or_str))  # f"{StrEnum}" is "Cls.MEMBER"


def _explain(status) -> str:
    """Serve's application message, then each deployment's state, replicas and message."""
    parts = [status.message] if status.message else []
    for dep_name, dep in status.deployments.items():
        replicas = ", ".join(f"{n} {_name(s)}" for s, n in dep.replica_states.items())
        parts.append(f"deployment {dep_name} {_name(dep.status)} (replicas: {replicas or 'none'})"
                     + (f": {dep.message}" if dep.message else ""))
    return "; ".join(parts)


def _deploy(name: str, app: Application, route_prefix: str, scalable: bool) -> None:
    ensure_serve_started()
    with BUILDING:
        serve_run_without_waiting(app, name, route_prefix, external_scaler_enabled=scalable)


async def start_app(name: str, app: Any, route_prefix: str, timeout_s: float,
                    scalable: bool = False) -> None:
    """Deploy `app` as `name` and wait for RUNNING; on failure or timeout delete it.

    Raises `ServeAppFailed` with Serve's message on DEPLOY_FAILED or UNHEALTHY, or when
    `timeout_s` passes (e.g. the gang does not fit on its nodes: Serve then waits forever).
    `scalable`: its replica count may change later (`scale_app`).
    The cleanup can add the deployment's `graceful_shutdown_timeout_s` (default 20 s): Serve
    waits it out even for replicas that were never placed. `name` should be new: an app
    already RUNNING under it would count as started before the new version is.
    """
    application = resolve_app(app)
    deadline = time.monotonic() + timeout_s
    # The deploy call runs in a thread, which a cancellation does not stop: awaited
    # directly, a stop in that moment deleted nothing (Serve had no app yet) and the
    # thread then deployed one that outlived its gang (the preemption bench's hang).
    deploying = asyncio.ensure_future(
        asyncio.to_thread(_deploy, name, application, route_prefix, scalable))
    try:
        await asyncio.shield(deploying)
        while True:
            status = await asyncio.to_thread(_app_status, name)
            state = _name(status.status) if status else "NOT_STARTED"
            if state == "RUNNING":
                return
            if state in ("DEPLOY_FAILED", "UNHEALTHY"):
                raise ServeAppFailed(f"Serve application {name!r} is {state}: "
                                     f"{_explain(status)}")
            if time.monotonic() > deadline:
                why = _explain(status) if status else "not known to Serve"
                raise ServeAppFailed(f"Serve application {name!r} not RUNNING after "
                                     f"{timeout_s:g}s ({state}): {why}")
            await asyncio.sleep(POLL_S)
    except BaseException:
        # Covers failures, timeouts and cancellation: leave nothing behind, once the
        # deploy call has ended (whatever it made is then Serve's to delete).
        await run_to_completion(deploying)
        await run_to_completion(delete_app(name))
        raise


def _ingress(name: str) -> dict | None:
    """The details of application `name`'s ingress deployment (replicas with their node
    and state), or None if Serve has no such application."""
    app = serve_details().get("applications", {}).get(name)
    if app is None:
        return None
    deployments = app.get("deployments") or {}
    ingress = (app.get("deployment_topology") or {}).get("ingress_deployment")
    if ingress is None and len(deployments) == 1:  # a topology not set yet
        [ingress] = deployments
    return deployments.get(ingress or "")


def replica_nodes(name: str) -> list[str] | None:
    """The node of each replica of application `name`'s ingress deployment, once every
    replica runs and none is starting or stopping; None until then (or with no app)."""
    return _settled(_ingress(name))


def _settled(deployment: dict | None) -> list[str] | None:
    """The node of each replica of a deployment (Serve's details), once exactly its
    target count runs and none is starting or stopping; else None."""
    if deployment is None:
        return None
    replicas = deployment.get("replicas") or []
    if len(replicas) != deployment.get("target_num_replicas") \
            or any(_name(r["state"]) != "RUNNING" or not r.get("node_id") for r in replicas):
        return None
    return sorted(r["node_id"] for r in replicas)


def deployment_replicas(name: str) -> dict[str, list[tuple[str, str]]]:
    """Each deployment of application `name` -> its running replicas, as (node, actor
    name); empty with no app."""
    app = serve_details().get("applications", {}).get(name) or {}
    return {dep: [(r["node_id"], r.get("actor_name") or r["replica_id"])
                  for r in details.get("replicas") or []
                  if _name(r["state"]) == "RUNNING" and r.get("node_id")]
            for dep, details in (app.get("deployments") or {}).items()}


async def scale_app(name: str, replicas: int, timeout_s: float) -> list[str]:
    """Set application `name`'s ingress deployment to `replicas` replicas (`scale`)."""
    ingress = await asyncio.to_thread(_ingress, name)
    if ingress is None:
        raise ServeAppFailed(f"Serve application {name!r} is not running")
    return (await scale(name, {ingress["name"]: replicas}, timeout_s))[ingress["name"]]


async def scale(name: str, counts: Mapping[str, int], timeout_s: float) -> dict[str, list[str]]:
    """Set deployments of application `name` to `counts` replicas each, without restarting
    the others, and wait until exactly those run: the node of each, per deployment.

    Serve chooses which replica goes on a downscale (not running ones first, then on the
    nodes with the fewest replicas, the newest) and where one comes on an upscale (within
    the deployment's node selector): the nodes returned are where they really are.
    Raises ServeAppFailed when `timeout_s` passes first (a replica that cannot be placed,
    one slow to stop: its `graceful_shutdown_timeout_s`).
    """
    def set_counts() -> None:
        if _app_status(name) is None:
            raise ServeAppFailed(f"Serve application {name!r} is not running")
        for deployment, replicas in counts.items():
            serve_set_replicas(name, deployment, replicas)

    def settled() -> dict[str, list[str] | None]:
        app = serve_details().get("applications", {}).get(name) or {}
        deployments = app.get("deployments") or {}
        return {d: _settled(deployments.get(d)) for d in counts}

    deadline = time.monotonic() + timeout_s
    await asyncio.to_thread(set_counts)
    while True:
        nodes = await asyncio.to_thread(settled)
        if all(found is not None and len(found) == counts[d] for d, found in nodes.items()):
            return {d: found for d, found in nodes.items() if found is not None}
        if time.monotonic() > deadline:
            status = await asyncio.to_thread(_app_status, name)
            why = _explain(status) if status else "not known to Serve"
            wanted = ", ".join(f"{d} at {n}" for d, n in counts.items())
            raise ServeAppFailed(f"Serve application {name!r} not with deployment(s) "
                                 f"{wanted} running replicas after {timeout_s:g}s: {why}")
        await asyncio.sleep(POLL_S)


def _delete(name: str) -> None:
    try:
        if _app_status(name) is not None:
            serve.delete(name)  # waits until Serve reports it gone
    except RayServeException:
        pass  # Serve is not running: nothing to delete


async def delete_app(name: str) -> None:
    """Delete application `name` and wait until it is gone; no error if it is absent."""
    await asyncio.to_thread(_delete, name)
