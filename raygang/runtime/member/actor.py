"""Member actors: the user's function or class, with raygang's control methods added.

A class program becomes a subclass of the user's class, so peers and drivers call its
methods on a real actor handle, as with `@ray.remote`. Control methods are dunder-named to
stay out of the user's namespace:

- `__raygang_ready__()`: after the constructor; re-raises a constructor error so that it
  reaches the scheduler as an ordinary task error (class, message, traceback).
- `__raygang_run__(peers, world=None)`: called on every member only after all are ready
  (the launch barrier); a member added to an elastic gang gets the world it joins. Returns two objects: a small marker the scheduler awaits, and the result,
  which stays in the object store for the client (the scheduler never copies it).
- `__raygang_watch__()`: in a concurrency group of its own, blocks until the actor dies;
  it is how the scheduler notices a member of a long-running service dying.
- `__raygang_started__()` and `__raygang_outcome__()`: in the control group, whether
  `__raygang_run__` was called, and what it returned (or the error it raised) once it has
  ended. A scheduler that restarted picks up a running gang with them: the members outlive
  the scheduler (they are detached) and so does their run; only the refs of its results
  were the old process's. A second `__raygang_run__` never runs the body twice: it
  returns the first one's outcome.
- `__raygang_resize__(world)`: an elastic gang's members changed; in the control group,
  like the preemption signal. Takes on the new `World` (rank, world size, peers), then
  runs the user class's `on_resize(world)` and the `get_context().on_resize` callbacks;
  the scheduler starts a new member's body only once every staying member replied.
- `__raygang_preempt__()`: the graceful preemption signal, in the same control group so
  that it runs while `run()` is busy. Sets the context's `preempted` flag, then runs the
  user class's `on_preempt()` method (if any) and the callbacks registered with
  `get_context().on_preempt(...)`. Returns `{"hooks": n, "error": None | "Class: message",
  "running": bool}`, `running` saying whether the body (run() or the function) is still
  running once the hooks have returned (False for a service, whose body is no more than
  its constructor); a hook that raises is reported there, never raised (the member is
  killed after the grace period anyway). Only the first signal runs hooks; a repeat
  returns hooks=0.

The control group has 6 slots: `__raygang_watch__` holds one for the member's whole life
(one more per scheduler restart: the old call stays blocked), `__raygang_outcome__` one
while run() lasts (again per restart), `__raygang_preempt__` one while `run()` holds the
default group; the rest are spare. In a sync actor a slot
is a thread; in an async actor the group is its own event loop, on a thread of its own.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
import threading
import weakref
from collections.abc import Callable
from typing import Any

import ray

from raygang.control.program import RoleProgram
from raygang.runtime.member import context as _ctx
from raygang.runtime.member.fence import fence
from raygang.runtime.names import CONTROL_GROUP
from raygang.runtime.ray_private import import_attr  # as Ray Serve resolves `import_path`

CONTROL_SLOTS = 6  # watch and outcome (each once per scheduler life) + preempt + spare
SERVING = "serving"  # marker: the member has no run(); the gang runs until cancelled
DONE = "done"


log = logging.getLogger(__name__)


def _node_id() -> str:
    return ray.get_runtime_context().get_node_id()


def _preempt_reply(member: _SyncControl, hooks: int, errors: list[str]) -> dict[str, Any]:
    return {"hooks": hooks, "error": "; ".join(errors) if errors else None,
            "running": member._raygang_running()}


def _hook_error(hook: Callable[[], Any], exc: BaseException) -> str:
    log.error("raygang: preemption hook %r raised", hook, exc_info=exc)
    return f"{type(exc).__name__}: {exc}"


class _SyncControl:
    # Each member class sets the constructor's error (`__raygang_ready__` raises it) and
    # says what its body is (None: a service, whose body is its constructor).
    _raygang_error: BaseException | None

    def _raygang_body(self) -> Callable[[], Any] | None:
        raise NotImplementedError

    def _raygang_enter(self, context: _ctx.GangContext) -> None:
        context.node_id = _node_id()
        fence(context.node_id, context.fence_s)  # ends itself if cut off (fence.py)
        _ctx._set_context(context)
        self._raygang_started = False
        self._raygang_ended = threading.Event()
        self._raygang_outcome: tuple[str, Any] = ("", None)

    def _raygang_record(self, run: Callable[[], tuple[str, Any]]) -> tuple[str, Any]:
        """Run the body through `run` and keep what it returned or raised (for outcome)."""
        if self._raygang_started:  # a repeated release: the first run's outcome, once
            self._raygang_ended.wait()
            return self._raygang_recorded()
        self._raygang_started = True
        try:
            outcome = run()
        except BaseException as error:
            self._raygang_keep("error", error)
            raise
        self._raygang_keep("value", outcome)
        return outcome

    def _raygang_running(self) -> bool:
        """Whether the body was released and has not ended. A service has no body: none
        runs, even in the instant between its release and its record (a preemption's reply
        said "running" there once, on a loaded CI)."""
        started = getattr(self, "_raygang_started", False)  # False before `_raygang_enter`
        return started and not self._raygang_ended.is_set() and self._raygang_body() is not None

    def _raygang_keep(self, kind: str, value: Any) -> None:
        self._raygang_outcome = (kind, value)
        self._raygang_ended.set()

    def _raygang_recorded(self) -> tuple[str, Any]:
        kind, value = self._raygang_outcome
        if kind == "error":
            raise value
        return value

    def __raygang_ready__(self) -> str:
        if self._raygang_error is not None:
            raise self._raygang_error
        return _node_id()

    @ray.method(num_returns=2)
    def __raygang_run__(self, peers: tuple[Any, ...],
                        world: _ctx.World | None = None) -> tuple[str, Any]:
        _ctx._released(peers, world)
        body = self._raygang_body()
        if body is None:
            return self._raygang_record(lambda: (SERVING, None))
        return self._raygang_record(lambda: (DONE, body()))

    @ray.method(concurrency_group=CONTROL_GROUP)
    def __raygang_started__(self) -> bool:
        return self._raygang_started

    @ray.method(num_returns=2, concurrency_group=CONTROL_GROUP)
    def __raygang_outcome__(self) -> tuple[str, Any]:
        self._raygang_ended.wait()
        return self._raygang_recorded()

    @ray.method(concurrency_group=CONTROL_GROUP)
    def __raygang_watch__(self) -> None:
        threading.Event().wait()

    def _raygang_preempt_hooks(self) -> list[Callable[[], Any]] | None:
        """Set the preempted flag; the hooks to run (None if signalled before)."""
        callbacks = _ctx.get_context()._signal_preempted()
        if callbacks is None:
            return None
        own = self._raygang_own_hook()
        return ([own] if callable(own) else []) + callbacks

    def _raygang_own_hook(self, name: str = "on_preempt") -> Callable[..., Any] | None:
        # The user class's own method (a class member's user class is a base of it);
        # function members have no user class, so only callbacks.
        return getattr(self, name, None)

    def _raygang_resize_hooks(self, world: _ctx.World) -> list[Callable[..., Any]]:
        """Take on the new world; the hooks to call with it (none for an older world)."""
        callbacks = _ctx.get_context()._resized(world)
        if callbacks is None:
            return []
        own = self._raygang_own_hook("on_resize")
        return ([own] if callable(own) else []) + callbacks

    @staticmethod
    def _raygang_call_hooks(hooks: list[Callable[..., Any]], *args: Any) -> list[str]:
        # A thread of the control group: hooks run here, concurrently with run() (which
        # holds the default group's thread); an `async def` callback gets its own loop.
        errors = []
        for hook in hooks:
            try:
                result = hook(*args)
                if inspect.isawaitable(result):
                    asyncio.run(_ctx._awaited(result))
            except Exception as exc:
                errors.append(_hook_error(hook, exc))
        return errors

    @ray.method(concurrency_group=CONTROL_GROUP)
    def __raygang_preempt__(self) -> dict[str, Any]:
        hooks = self._raygang_preempt_hooks()
        if hooks is None:
            return _preempt_reply(self, 0, [])
        return _preempt_reply(self, len(hooks), self._raygang_call_hooks(hooks))

    @ray.method(concurrency_group=CONTROL_GROUP)
    def __raygang_resize__(self, world: _ctx.World) -> dict[str, Any]:
        """Take on `world` (an elastic gang's members changed) and run the resize hooks;
        {"hooks": n, "error": None | "Class: message"} once they returned."""
        hooks = self._raygang_resize_hooks(world)
        errors = self._raygang_call_hooks(hooks, world)
        return {"hooks": len(hooks), "error": "; ".join(errors) if errors else None}


class _AsyncControl(_SyncControl):
    """For members whose class has `async def` methods: Ray runs those actors on an event
    loop, where a blocking control method would stall every call."""

    async def __raygang_ready__(self) -> str:  # type: ignore[override]
        # The default group's loop, where run() and the user's methods run: preemption
        # hooks are sent there (see __raygang_preempt__).
        self._raygang_loop = asyncio.get_running_loop()
        return _SyncControl.__raygang_ready__(self)

    @ray.method(num_returns=2)
    async def __raygang_run__(self, peers: tuple[Any, ...],
                              world: _ctx.World | None = None) -> tuple[str, Any]:
        self._raygang_loop = asyncio.get_running_loop()
        _ctx._released(peers, world)
        body = self._raygang_body()
        if self._raygang_started:  # a repeated release: the first run's outcome, once
            await asyncio.to_thread(self._raygang_ended.wait)
            return self._raygang_recorded()
        self._raygang_started = True
        try:
            if body is None:
                outcome: tuple[str, Any] = (SERVING, None)
            else:
                result = body()
                if inspect.isawaitable(result):
                    result = await result
                outcome = (DONE, result)
        except BaseException as error:
            self._raygang_keep("error", error)
            raise
        self._raygang_keep("value", outcome)
        return outcome

    @ray.method(concurrency_group=CONTROL_GROUP)
    async def __raygang_started__(self) -> bool:
        return self._raygang_started

    @ray.method(num_returns=2, concurrency_group=CONTROL_GROUP)
    async def __raygang_outcome__(self) -> tuple[str, Any]:
        await asyncio.to_thread(self._raygang_ended.wait)
        return self._raygang_recorded()

    @ray.method(concurrency_group=CONTROL_GROUP)
    async def __raygang_watch__(self) -> None:
        await asyncio.Event().wait()

    @ray.method(concurrency_group=CONTROL_GROUP)
    async def __raygang_preempt__(self) -> dict[str, Any]:
        # This runs on the control group's own loop (Ray gives each concurrency group of
        # an async actor an event loop on a thread of its own). Every hook, sync or async,
        # is run on the member's main loop instead, the one run() and the user's methods
        # use: hooks typically poke the user's asyncio objects (set an asyncio.Event that
        # run() awaits), which is safe only from their own loop, and a sync hook there
        # behaves as a sync method of an async Ray actor does (it runs on the loop). Not
        # `asyncio.to_thread`, which would race the loop's objects. This coroutine only
        # awaits the outcome, so it blocks neither loop. A run() that blocks its loop
        # delays the hooks (bounded by the grace period); the `preempted` flag, set
        # first, from this thread, is visible to it at once.
        hooks = self._raygang_preempt_hooks()
        if hooks is None:
            return _preempt_reply(self, 0, [])
        return _preempt_reply(self, len(hooks), await self._raygang_hooks_on_loop(hooks))

    @ray.method(concurrency_group=CONTROL_GROUP)
    async def __raygang_resize__(self, world: _ctx.World) -> dict[str, Any]:
        # On the member's main loop, as preemption hooks are (see __raygang_preempt__).
        hooks = self._raygang_resize_hooks(world)
        errors = await self._raygang_hooks_on_loop(hooks, world)
        return {"hooks": len(hooks), "error": "; ".join(errors) if errors else None}

    async def _raygang_hooks_on_loop(self, hooks: list[Callable[..., Any]],
                                     *args: Any) -> list[str]:
        loop = getattr(self, "_raygang_loop", None)
        errors = []
        for hook in hooks:
            try:
                await _call_on_loop(loop, hook, *args)
            except Exception as exc:
                errors.append(_hook_error(hook, exc))
        return errors


async def _call_on_loop(loop: asyncio.AbstractEventLoop | None, hook: Callable[..., Any],
                        *args: Any) -> Any:
    """Call `hook(*args)` (awaiting what it returns) on `loop`, from another loop's
    coroutine."""

    async def call() -> Any:
        result = hook(*args)
        if inspect.isawaitable(result):
            result = await result
        return result

    if loop is None or loop.is_closed() or loop is asyncio.get_running_loop():
        return await call()  # not released yet: no main loop known; run it here
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(call(), loop))


def _is_async_class(cls: type) -> bool:
    return any(inspect.iscoroutinefunction(m) for _, m in inspect.getmembers(cls, inspect.isfunction))


def _class_member(user_cls: type[Any]) -> type:
    control = _AsyncControl if _is_async_class(user_cls) else _SyncControl

    class Member(control, user_cls):  # type: ignore[misc, valid-type]
        def __init__(self, context: _ctx.GangContext, args: tuple, kwargs: dict):
            self._raygang_enter(context)
            self._raygang_error: BaseException | None = None
            try:
                user_cls.__init__(self, *args, **kwargs)
            except Exception as error:  # reported by __raygang_ready__, with its class
                self._raygang_error = error

        def _raygang_body(self):
            return getattr(self, "run", None)

    # Shown in Ray's logs and dashboard under the user's name. The module stays ours, so
    # cloudpickle cannot resolve it by reference and ships the class by value.
    Member.__name__ = Member.__qualname__ = user_cls.__name__
    return Member


class _FunctionBody:
    """A function program: the gang function is the member's whole body."""

    def __init__(self, context: _ctx.GangContext, fn: Any, args: tuple, kwargs: dict):
        self._raygang_enter(context)  # type: ignore[attr-defined]
        self._raygang_error: BaseException | None = None
        self._call = lambda: fn(*args, **kwargs)

    def _raygang_body(self):
        return self._call


class _FunctionMember(_FunctionBody, _SyncControl):
    pass


class _AsyncFunctionMember(_FunctionBody, _AsyncControl):
    pass


class _ImportedMember(_SyncControl):
    """A program named by import path ("pkg.module:attr"), as REST and the CLI submit it.

    Imported here, in the member's own process, once its runtime_env (working_dir, pip) is
    in place: the scheduler and the API server never need the user's code. A class is
    instantiated and its `run()` is the body (no `run()`: a service gang); a function is
    the body. Import and constructor errors surface through `__raygang_ready__` like any
    constructor error, naming the member. An `async def` body runs on a loop of its own.
    """

    def __init__(self, context: _ctx.GangContext, path: str, args: tuple, kwargs: dict):
        self._raygang_enter(context)
        self._raygang_error = None
        self._instance: Any = None
        self._body: Callable[[], Any] | None = None
        try:
            target = import_attr(path)
            if inspect.isclass(target):
                self._instance = target(*args, **kwargs)
                self._body = getattr(self._instance, "run", None)
            elif callable(target):
                self._body = functools.partial(target, *args, **kwargs)
            else:
                raise TypeError(f"{path} is a {type(target).__name__}, not a function or class")
        except Exception as error:
            self._raygang_error = error

    def _raygang_body(self):
        body = self._body
        if body is None:
            return None

        def run() -> Any:
            result = body()
            if inspect.isawaitable(result):
                result = asyncio.run(_ctx._awaited(result))
            return result

        return run

    def _raygang_own_hook(self, name: str = "on_preempt") -> Callable[..., Any] | None:
        return getattr(self._instance, name, None)


_actor_classes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def member_actor_class(program: RoleProgram):
    """The Ray actor class for a role's members (options are applied per member).

    Cached per user class (and once for all functions): each new actor class is exported
    to the GCS and loaded by every worker that runs it, which costs a gang launch dearly.
    """
    key: type
    if program.is_import_path:
        key = _ImportedMember
    elif program.is_class:
        key = program.target
    elif inspect.iscoroutinefunction(program.target):
        key = _AsyncFunctionMember
    else:
        key = _FunctionMember
    actor_class = _actor_classes.get(key)
    if actor_class is None:
        cls = _class_member(key) if program.is_class else key
        # Ray's overloads of `ray.remote` leave out `concurrency_groups` (an actor option).
        actor_class = ray.remote(  # type: ignore[call-overload]
            concurrency_groups={CONTROL_GROUP: CONTROL_SLOTS})(cls)
        _actor_classes[key] = actor_class
    return actor_class


def constructor_args(program: RoleProgram, context: _ctx.GangContext) -> tuple:
    if program.is_class:
        return (context, program.args, program.kwargs)
    return (context, program.target, program.args, program.kwargs)
