"""`raygang.get_context()`: who am I in my gang, who are my peers, am I being preempted."""

from __future__ import annotations

import asyncio
import inspect
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

_Hook = TypeVar("_Hook", bound=Callable[..., Any])

# Guards the "flag set + callbacks snapshot" against a concurrent registration, so that a
# callback is either in the snapshot the signal runs or sees the flag and runs at once.
_preempt_lock = threading.Lock()


@dataclass(frozen=True)
class World:
    """An elastic gang's membership after a resize, as one member sees it.

    Ranks are dense: the members present now, in the order of their gang rank (roles in
    declaration order), numbered 0..size-1, so a data-parallel group re-forms on them as
    it is. A member keeps its name (`role-index`) across resizes; its rank may change
    when a member before it goes."""

    generation: int  # 0 at launch, +1 per resize (a member may skip one it was not in)
    size: int
    rank: int  # this member's rank in the new world
    members: tuple[str, ...]  # "<role>-<index>" of each member, by rank
    peers: tuple[Any, ...]  # their actor handles, by rank
    role_sizes: dict[str, int]
    added: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()


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

    Elastic gangs (roles with `replicas=(min, max)`, `resize="live"`): when members are
    added or removed, every member staying is told the new `World` before a new member's
    body starts (the barrier): `rank`, `world_size`, `role_sizes`, `peers` and
    `generation` change, then the member class's own `on_resize(world)` method runs if it
    has one, and every callback registered with `on_resize(callback)`. A member being
    removed is told as a preempted gang is (`preempted`, `on_preempt`), with the gang's
    grace period.
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
    generation: int = 0  # resizes of an elastic gang this member has been told of
    min_size: int | None = None  # elastic gangs: the fewest and most members it runs with
    max_size: int | None = None
    fence_s: float | None = None  # the gang's fence (GangSpec.fence_s; member/fence.py)
    _preempted: threading.Event = field(
        default_factory=threading.Event, init=False, repr=False, compare=False
    )
    _preempt_callbacks: list[Callable[[], Any]] = field(
        default_factory=list, init=False, repr=False, compare=False
    )
    _resize_callbacks: list[Callable[[World], Any]] = field(
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

    # Resizes (elastic gangs) --------------------------------------------------------------
    def on_resize(self, callback: _Hook) -> _Hook:
        """Run `callback(world)` (a function or an `async def`) each time members are added
        to or removed from this gang, after `rank`, `world_size` and `peers` changed and
        before a new member's body starts. Returns `callback` (a decorator)."""
        if not callable(callback):
            raise TypeError(f"on_resize takes a callable, got {callback!r}")
        self._resize_callbacks.append(callback)
        return callback

    def _resized(self, world: World) -> list[Callable[[World], Any]] | None:
        """Take on `world`; the callbacks to run (None: an older world than this one's)."""
        if world.generation <= self.generation:
            return None
        self.generation = world.generation
        self.rank = world.rank
        self.world_size = world.size
        self.role_sizes = dict(world.role_sizes)
        self._role_ranks = dense_role_ranks(world.members)
        self.peers = world.peers
        return list(self._resize_callbacks)

    # Pickling: an Event holds a lock and cannot be pickled; the preemption state is
    # per process anyway (the scheduler pickles the context to the member once).
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("_preempted", None)
        state.pop("_preempt_callbacks", None)
        state.pop("_resize_callbacks", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._preempted = threading.Event()
        self._preempt_callbacks = []
        self._resize_callbacks = []


def dense_role_ranks(members: tuple[str, ...]) -> dict[str, range]:
    """Each role's ranks among `members` ("<role>-<index>" in rank order; a role's members
    are consecutive)."""
    ranks: dict[str, range] = {}
    for rank, name in enumerate(members):
        role = name.rsplit("-", 1)[0]
        start = ranks[role].start if role in ranks else rank
        ranks[role] = range(start, rank + 1)
    return ranks


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


def _released(peers: tuple[Any, ...], world: World | None) -> None:
    """The member is released: its peers, and for one joining an elastic gang, the world
    it joins (its first, not a resize: no hook runs)."""
    context = get_context()
    if world is not None:
        context._resized(world)
    context.peers = peers


def get_context() -> GangContext:
    """The gang context of the calling member; raises outside a gang member."""
    if _current is None:
        raise RuntimeError("raygang.get_context() works only inside a gang member")
    return _current


def _set_context(context: GangContext | None) -> None:
    global _current
    _current = context
