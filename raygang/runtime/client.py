"""Finding (or starting) the scheduler actor from a driver."""

from __future__ import annotations

import logging
import time

import ray

from raygang.core.config import SchedulerConfig
from raygang.runtime.errors import SchedulerNotRunningError
from raygang.runtime.launcher import NAMESPACE
from raygang.runtime.scheduler import SCHEDULER_NAME, SchedulerActor

log = logging.getLogger(__name__)
SHUTDOWN_WAIT_S = 60.0  # how long shutdown() waits for a restarting scheduler to answer


def _ensure_ray() -> None:
    if not ray.is_initialized():
        ray.init()  # like `.remote()` in Ray: connect to, or start, a local cluster


def start(config: SchedulerConfig | None = None):
    """Get or create the scheduler actor; safe to call from many drivers at once.

    The first caller's `config` wins; a later caller asking for a different one gets a
    warning and the running scheduler.
    """
    _ensure_ray()
    asked = config
    config = config or SchedulerConfig()
    handle = SchedulerActor.options(
        name=SCHEDULER_NAME,
        namespace=NAMESPACE,
        lifetime="detached",
        get_if_exists=True,  # the GCS makes get-or-create atomic across drivers
    ).remote(config)
    running = ray.get(handle.ping.remote())["config"]
    if asked is None:  # "whatever runs, or a default one": nothing to warn about
        return handle
    wanted = config.model_dump(mode="json")
    differ = sorted(k for k in {*running, *wanted} if running.get(k) != wanted.get(k))
    if differ:
        log.warning(
            "raygang scheduler already running with another config (it keeps its own): %s",
            "; ".join(f"{k}: running {running.get(k)!r}, asked {wanted.get(k)!r}" for k in differ),
        )
    return handle


def scheduler():
    """The running scheduler actor, or SchedulerNotRunningError."""
    _ensure_ray()
    try:
        return ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
    except ValueError:
        raise SchedulerNotRunningError(
            "no raygang scheduler in this Ray cluster; call raygang.start()"
        ) from None


def shutdown() -> None:
    """Cancel every unfinished gang, then stop the scheduler actor (if one runs)."""
    if not ray.is_initialized():
        return
    deadline = time.monotonic() + SHUTDOWN_WAIT_S
    while True:
        try:
            handle = ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
        except ValueError:
            return
        try:
            ray.get(handle.shutdown.remote())
            break
        except ray.exceptions.RayActorError:  # it is restarting: ask the restarted one
            if time.monotonic() > deadline:
                break  # kill it anyway
            time.sleep(0.2)
    ray.kill(handle, no_restart=True)
