"""Member actors: the user's function or class, with raygang's control methods added.

A class program becomes a subclass of the user's class, so peers and drivers call its
methods on a real actor handle, as with `@ray.remote`. Control methods are dunder-named to
stay out of the user's namespace:

- `__raygang_ready__()`: after the constructor; re-raises a constructor error so that it
  reaches the scheduler as an ordinary task error (class, message, traceback).
- `__raygang_run__(peers)`: called on every member only after all are ready (the launch
  barrier). Returns two objects: a small marker the scheduler awaits, and the result,
  which stays in the object store for the client (the scheduler never copies it).
- `__raygang_watch__()`: in a concurrency group of its own, blocks until the actor dies;
  it is how the scheduler notices a member of a long-running service dying.
"""

from __future__ import annotations

import asyncio
import inspect
import threading
import weakref
from typing import Any

import ray

from raygang.runtime import context as _ctx
from raygang.runtime.program import RoleProgram

CONTROL_GROUP = "raygang"
SERVING = "serving"  # marker: the member has no run(); the gang runs until cancelled
DONE = "done"


def _node_id() -> str:
    return ray.get_runtime_context().get_node_id()


class _SyncControl:
    def _raygang_enter(self, context: _ctx.GangContext) -> None:
        context.node_id = _node_id()
        _ctx._set_context(context)

    def __raygang_ready__(self) -> str:
        if self._raygang_error is not None:
            raise self._raygang_error
        return _node_id()

    @ray.method(num_returns=2)
    def __raygang_run__(self, peers: tuple[Any, ...]) -> tuple[str, Any]:
        _ctx.get_context().peers = peers
        body = self._raygang_body()
        if body is None:
            return SERVING, None
        return DONE, body()

    @ray.method(concurrency_group=CONTROL_GROUP)
    def __raygang_watch__(self) -> None:
        threading.Event().wait()


class _AsyncControl(_SyncControl):
    """For members whose class has `async def` methods: Ray runs those actors on an event
    loop, where a blocking control method would stall every call."""

    async def __raygang_ready__(self) -> str:  # type: ignore[override]
        return _SyncControl.__raygang_ready__(self)

    @ray.method(num_returns=2)
    async def __raygang_run__(self, peers: tuple[Any, ...]) -> tuple[str, Any]:  # type: ignore[override]
        _ctx.get_context().peers = peers
        body = self._raygang_body()
        if body is None:
            return SERVING, None
        result = body()
        if inspect.isawaitable(result):
            result = await result
        return DONE, result

    @ray.method(concurrency_group=CONTROL_GROUP)
    async def __raygang_watch__(self) -> None:  # type: ignore[override]
        await asyncio.Event().wait()


def _is_async_class(cls: type) -> bool:
    return any(inspect.iscoroutinefunction(m) for _, m in inspect.getmembers(cls, inspect.isfunction))


def _class_member(user_cls: type) -> type:
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
        self._raygang_error = None
        self._call = lambda: fn(*args, **kwargs)

    def _raygang_body(self):
        return self._call


class _FunctionMember(_FunctionBody, _SyncControl):
    pass


class _AsyncFunctionMember(_FunctionBody, _AsyncControl):
    pass


_actor_classes: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def member_actor_class(program: RoleProgram):
    """The Ray actor class for a role's members (options are applied per member).

    Cached per user class (and once for all functions): each new actor class is exported
    to the GCS and loaded by every worker that runs it, which costs a gang launch dearly.
    """
    if program.is_class:
        key = program.target
    elif inspect.iscoroutinefunction(program.target):
        key = _AsyncFunctionMember
    else:
        key = _FunctionMember
    actor_class = _actor_classes.get(key)
    if actor_class is None:
        cls = _class_member(key) if program.is_class else key
        actor_class = ray.remote(concurrency_groups={CONTROL_GROUP: 2})(cls)
        _actor_classes[key] = actor_class
    return actor_class


def constructor_args(program: RoleProgram, context: _ctx.GangContext) -> tuple:
    if program.is_class:
        return (context, program.args, program.kwargs)
    return (context, program.target, program.args, program.kwargs)
