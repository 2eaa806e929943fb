"""`raygang.get_context()`: who am I in my gang, who are my peers, am I being preempted."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

_Hook = TypeVar("_Hook", bound=Callable[[], Any])

# Guards the "flag set + callbacks snapshot" against a concurrent registration, so that a
# callback is either in the snapshot the signal runs or sees the flag and runs at once.
_preempt_lock = threading.Lock()


@dataclass
class GangContext:
    """Set in every member's process before user code runs.

    `peers` (every member's actor handle, in rank order, this one included) is filled in at
    the launch barrier, so it is available in `run()` / the gang function and in methods
    called after it, not in `__init__` (later roles may not exist yet then).

    Preemption: when the scheduler preempts a running gang, each member is signalled and
    has up to the gang's grace period to checkpoint before it is killed (less once every
    member's hooks, or else its body, have returned). Then `preempted` turns
    True (readable from any thread, e.g. a loop in `run()`), the member class's own
    `on_preempt()` method runs if it has one, and so does every callback registered with
    `on_preempt(callback)` (the way for function gangs).

    The preemption state (flag and callbacks) belongs to one process: it is not pickled,
    so a copy or an unpickled context starts un-preempted, with no callbacks.
    """

    gang_id: str
    gang_name: str
    role: str
    role_rank: int  # index of this member within its role
    rank: int  # index of this member in the whole gang
    world_size: int
    role_sizes: dict[str, int]
    attempt: int = 0  # how many times the gang was restarted before this run
    node_id: str | None = None
    peers: tuple[Any, ...] | None = None
    _role_ranks: dict[str, range] = field(default_factory=dict, repr=False)
    _preempted: threading.Event = field(
        default_factory=threading.Event, init=False, repr=False, compare=False
    )
    _preempt_callbacks: list[Callable[[], Any]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )

    def peers_in(self, role: str) -> tuple[Any, ...]:
        """The actor handles of `role`'s members, in role-rank order."""
        if self.peers is None:
            raise RuntimeError("peers are known only once the gang is released to run")
        return tuple(self.peers[i] for i in self._role_ranks[role])

    # Preemption ------------------------------------------------------------------------
    @property
    def preempted(self) -> bool:
        """True once this gang has been told it is being preempted (it stays True)."""
        return self._preempted.is_set()

    def wait_preempted(self, timeout: float | None = None) -> bool:
        """Block until preempted or `timeout` seconds passed; returns `preempted`.

        Blocks the calling thread: in an `async def` body use
        `await asyncio.to_thread(ctx.wait_preempted, timeout)`.
        """
        return self._preempted.wait(timeout)

    def on_preempt(self, callback: _Hook) -> _Hook:
        """Run `callback()` (a function or an `async def`) when preemption is signalled.

        Returns `callback`, so it works as a decorator. Callbacks run in registration
        order after the member class's `on_preempt()` method; one that raises is reported
        to the scheduler and does not stop the others. Registered once the gang has
        already been signalled, the callback runs at once, in the caller's thread (an
        `async def` one as a task of the caller's running event loop, if there is one),
        so a body that registers late still gets it (and sees its exception).
        """
        if not callable(callback):
            raise TypeError(f"on_preempt takes a callable, got {callback!r}")
        with _preempt_lock:
            late = self._preempted.is_set()
            if not late:
                self._preempt_callbacks.append(callback)
        if late:
            _run_late(callback)
        return callback

    def _signal_preempted(self) -> list[Callable[[], Any]] | None:
        """Set the flag; the callbacks to run, or None if it was already set."""
        with _preempt_lock:
            if self._preempted.is_set():
                return None
            self._preempted.set()
            return list(self._preempt_callbacks)

    # Pickling: an Event holds a lock and cannot be pickled; the preemption state is
    # per process anyway (the scheduler pickles the context to the member once).
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_preempted", None)
        state.pop("_preempt_callbacks", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._preempted = threading.Event()
        self._preempt_callbacks = []


_late_tasks: set[asyncio.Task] = set()  # strong references until late async callbacks end


def _run_late(callback: Callable[[], Any]) -> None:
    result = callback()
    if not inspect.isawaitable(result):
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is None:
        asyncio.run(_awaited(result))
    else:
        task = loop.create_task(_awaited(result))
        _late_tasks.add(task)
        task.add_done_callback(_late_tasks.discard)


async def _awaited(awaitable: Any) -> Any:
    return await awaitable


_current: GangContext | None = None


def get_context() -> GangContext:
    """The gang context of the calling member; raises outside a gang member."""
    if _current is None:
        raise RuntimeError("raygang.get_context() works only inside a gang member")
    return _current


def _set_context(context: GangContext | None) -> None:
    global _current
    _current = context
