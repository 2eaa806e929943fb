"""The one way to reach the scheduler actor: starting it, calling it, stopping it.

`SchedulerClient` is used by the Python API (blocking calls; the scheduler is started if
none runs; a call made while the actor restarts is made again on the restarted one, for
up to `restart_wait_s`) and by the REST API (`.aio`: coroutines that fail fast with
`SchedulerUnavailable`, which the API answers with a 503). Either way the scheduler's own
errors come out as themselves, not wrapped in Ray's `RayTaskError`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar, cast

import ray
from ray.exceptions import ActorDiedError, RayActorError, RayTaskError

from raygang.control.api import SchedulerAPI
from raygang.control.errors import SchedulerNotRunningError
from raygang.runtime.names import NAMESPACE, SCHEDULER_NAME

if TYPE_CHECKING:
    from raygang.control.config import SchedulerConfig

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")
# A call, named by a protocol's method (`SchedulerAPI.status`, `TrainAPI.train_claim`):
# its parameters and result type those of `SchedulerClient.call` and `.acall`.
Method = Callable[Concatenate[Any, P], Coroutine[Any, Any, R]]
# How long shutdown() waits for a restarting scheduler to answer, and start() and
# shutdown() for a stopped one's name to be freed (`_wait_released`)
SHUTDOWN_WAIT_S = 60.0
PING_TIMEOUT_S = 2.0  # the REST API's readiness probe


class SchedulerUnavailable(RuntimeError):
    """The scheduler actor does not answer (not started, restarting, or gone)."""


def _ensure_ray() -> None:
    if not ray.is_initialized():
        ray.init()  # like `.remote()` in Ray: connect to, or start, a local cluster


def start(config: SchedulerConfig | None = None):
    """Get or create the scheduler actor; safe to call from many drivers at once.

    The first caller's `config` wins; a later caller asking for a different one gets a
    warning and the running scheduler.
    """
    # Here, not at the top: the client side (a Train controller's callback, the REST API)
    # reaches a running scheduler without importing it (tests/unit/test_layers.py).
    from raygang.control.config import SchedulerConfig
    from raygang.runtime.scheduler.actor import SchedulerActor

    _ensure_ray()
    asked = config
    config = config or SchedulerConfig()
    deadline = time.monotonic() + SHUTDOWN_WAIT_S
    while True:
        handle = SchedulerActor.options(
            name=SCHEDULER_NAME,
            namespace=NAMESPACE,
            lifetime="detached",
            get_if_exists=True,  # the GCS makes get-or-create atomic across drivers
        ).remote(config)
        try:
            running = ray.get(handle.ping.remote())["config"]
            break
        except ActorDiedError as error:
            # `ray.kill` returns before the GCS frees the name, so the actor found may be
            # one another driver's `shutdown()` is stopping: create a new one once it is
            # gone. An actor whose constructor failed would fail again: that is an error.
            if error.actor_init_failed or time.monotonic() > deadline:
                raise
            _wait_released(handle, deadline)
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
        except RayActorError:  # it is restarting: ask the restarted one
            if time.monotonic() > deadline:
                break  # kill it anyway
            time.sleep(0.2)
    ray.kill(handle, no_restart=True)
    _wait_released(handle, time.monotonic() + SHUTDOWN_WAIT_S)


def _wait_released(handle: Any, deadline: float) -> None:
    """Wait until the scheduler's name no longer leads to `handle`'s actor (`ray.kill`
    returns before the actor is dead), so that a `start()` after `shutdown()` creates a new
    scheduler rather than getting the one being stopped."""
    while time.monotonic() < deadline:
        try:
            found = ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
        except ValueError:
            return
        if found._actor_id != handle._actor_id:
            return  # another driver started a new one
        time.sleep(0.05)


class SchedulerClient:
    def __init__(self, handle: Any = None, *, start_if_missing: bool = False,
                 restart_wait_s: float = 0.0):
        self._handle = handle
        self._job: str | None = None  # handles belong to one driver session (job)
        self._start_if_missing = start_if_missing
        self._restart_wait_s = restart_wait_s

    def forget(self) -> None:
        """Look the actor up again on the next call (it was replaced, or shut down)."""
        self._handle = None

    def _actor(self) -> Any:
        if self._start_if_missing:
            _ensure_ray()
        job = ray.get_runtime_context().get_job_id() if ray.is_initialized() else None
        if self._handle is None or (self._job is not None and job != self._job):
            if self._start_if_missing:
                self._handle = start()
            else:
                try:
                    self._handle = ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)
                except ValueError:
                    raise SchedulerUnavailable(
                        "no raygang scheduler in this Ray cluster; run `raygang start`"
                    ) from None
            self._job = job
        return self._handle

    def call(self, method: Method[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """Call `method` (a protocol's: `SchedulerAPI.status`) and wait for its answer. If
        the actor dies or restarts meanwhile, the call is made again on the restarted
        actor (which first recovers its state) for up to `restart_wait_s`: every
        scheduler method is safe to repeat (submissions carry an idempotency key)."""
        retry = _Retry(self, self._restart_wait_s)
        while True:
            try:
                remote = getattr(self._actor(), method.__name__).remote(*args, **kwargs)
                return cast(R, ray.get(remote))
            except RayTaskError as error:
                raise _cause(error) from None
            except RayActorError as error:
                time.sleep(retry.after(error))

    def remote(self, method: Method[P, R], *args: P.args, **kwargs: P.kwargs) -> Any:
        """Start `method` and return its `ObjectRef` at once (for a caller that awaits
        many answers in its own event loop, as Tune's does; `ray.get` raises the
        scheduler's error wrapped in Ray's `RayTaskError`)."""
        return getattr(self._actor(), method.__name__).remote(*args, **kwargs)

    async def acall(self, method: Method[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
        """`call` as a coroutine."""
        return await self._acall(method.__name__, None, args, kwargs)

    async def _acall(self, name: str, timeout: float | None, args: tuple[Any, ...],
                     kwargs: dict[str, Any]) -> Any:
        """Call `name`; a call not answered within `timeout` is unavailable."""
        retry = _Retry(self, self._restart_wait_s)
        while True:
            try:
                ref = getattr(self._actor(), name).remote(*args, **kwargs)
                return await asyncio.wait_for(ref, timeout) if timeout else await ref
            except RayTaskError as error:
                raise _cause(error) from None
            except asyncio.TimeoutError:
                raise SchedulerUnavailable(
                    f"the raygang scheduler did not answer {name} within {timeout:g}s"
                ) from None
            except RayActorError as error:
                await asyncio.sleep(retry.after(error))

    @property
    def aio(self) -> SchedulerAPI:
        """The scheduler's calls as coroutines (the REST API's `create_app`)."""
        return cast(SchedulerAPI, AsyncScheduler(self))


class _Retry:
    """How a call goes on after the actor did not answer: once more at once if the handle
    was an old one (the actor may have been replaced), then, while `wait_s` lasts, after a
    growing pause; then SchedulerUnavailable."""

    def __init__(self, client: SchedulerClient, wait_s: float):
        self._client = client
        self._stale = client._handle is not None
        self._deadline = time.monotonic() + wait_s
        self._delay = 0.1

    def after(self, error: Exception) -> float:
        self._client.forget()
        if self._stale:
            self._stale = False
            return 0.0
        if time.monotonic() + self._delay > self._deadline:
            raise SchedulerUnavailable(
                f"the raygang scheduler does not answer: {error}") from None
        delay, self._delay = self._delay, min(2 * self._delay, 2.0)
        return delay


def _cause(error: RayTaskError) -> BaseException:
    return error.cause if error.cause is not None else error


class AsyncScheduler:
    """`SchedulerAPI` over the actor: each call a coroutine (`SchedulerClient.aio`)."""

    def __init__(self, client: SchedulerClient):
        self._client = client

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        if name.startswith("_") or not hasattr(SchedulerAPI, name):
            raise AttributeError(name)

        async def bound(*args: Any, **kwargs: Any) -> Any:
            return await self._client._acall(name, None, args, kwargs)

        return bound

    async def ping(self) -> dict[str, Any]:
        """As the actor's, within `PING_TIMEOUT_S` (the REST API's readiness probe)."""
        return cast(dict[str, Any], await self._client._acall("ping", PING_TIMEOUT_S, (), {}))
