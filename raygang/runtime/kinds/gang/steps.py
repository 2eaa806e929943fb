"""The single steps a launch takes on Ray, each safe to repeat or to take on nothing:
kill a member, remove a placement group, wait for groups to be ready, for killed members'
names to be free, for a body to end; and how a member's failure and its preemption reply
are told (`launch.GangLaunch`, `elastic.ElasticLaunch`)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import ray
from ray.exceptions import RayActorError, RayTaskError
from ray.util.placement_group import PlacementGroup, remove_placement_group

from raygang.control.status import GangError
from raygang.control.tasks import run_to_completion, wait_within
from raygang.core.spec import GangSpec, MemberSlot
from raygang.runtime.names import NAMESPACE
from raygang.runtime.placement import SETTLE_S

log = logging.getLogger(__name__)
T = TypeVar("T")


def describe_failure(slot: MemberSlot | None, exc: BaseException) -> GangError:
    """The member's own exception class and message, whichever way Ray delivered it."""
    member = f"{slot.role}-{slot.index}" if slot else None
    rank = slot.rank if slot else None
    if isinstance(exc, RayTaskError):
        cause = exc.cause if exc.cause is not None else exc
        return GangError(
            member=member, rank=rank, error_type=type(cause).__name__,
            message=str(cause), traceback=str(exc),
        )
    if isinstance(exc, RayActorError):
        first = (getattr(exc, "error_msg", None) or str(exc)).strip().splitlines()[0]
        return GangError(member=member, rank=rank, error_type="ActorDiedError", message=first)
    return GangError(member=member, rank=rank, error_type=type(exc).__name__, message=str(exc))


def kill_member(handle: Any, name: str) -> None:
    """Kill a member actor (None: none). Never raises."""
    if handle is None:
        return
    try:
        ray.kill(handle, no_restart=True)
    except Exception:  # already gone
        log.debug("kill of %s failed", name, exc_info=True)


def remove_group(pg: PlacementGroup | None, name: str) -> None:
    """Remove a placement group (None: none). Never raises."""
    if pg is None:
        return
    try:
        remove_placement_group(pg)
    except Exception:
        log.warning("removing placement group %s failed", name, exc_info=True)


async def names_free(names: Sequence[str], timeout: float = 10.0) -> None:
    """Wait until killed members' names are free again (a restarted member takes its
    name back; Ray frees a name once the GCS has the actor dead)."""
    deadline = time.monotonic() + timeout
    for name in names:
        while time.monotonic() < deadline:
            try:
                ray.get_actor(name, namespace=NAMESPACE)
            except ValueError:
                break
            await asyncio.sleep(0.05)


# Creating a placement group or a named actor is a synchronous call to the GCS, which
# waits out a GCS outage (up to Ray's `gcs_server_request_timeout_seconds`, 60 s): made
# here, in threads of their own (not asyncio's default pool of cpu_count + 4, which other
# slow calls share), so that it never holds the scheduler's event loop up.
_GCS_CALLS = ThreadPoolExecutor(max_workers=16, thread_name_prefix="raygang-gcs")
_undoing: set[asyncio.Future[Any]] = set()  # undos under way, held until done


async def off_the_loop(make: Callable[[], T], undo: Callable[[], None],
                       timeout: float) -> T:
    """`make()` in a GCS-call thread. Nothing it makes is left behind by a caller that
    stops waiting: cancelled meanwhile, the caller waits (held) for `make` to end, then
    for `undo()`, then raises its cancellation; past `timeout` (the GCS does not answer)
    it raises TimeoutError at once, and `undo()` runs once `make` has ended."""
    loop = asyncio.get_running_loop()
    future = loop.run_in_executor(_GCS_CALLS, make)
    deadline = loop.time() + timeout
    cancelled = False
    while not future.done():
        left = deadline - loop.time()
        if left <= 0 and not cancelled:
            future.add_done_callback(lambda made: _undo_later(made, undo))
            raise TimeoutError(f"no answer from the GCS within {timeout:g}s")
        try:  # asyncio.wait, not wait_for: that may swallow a cancellation (tasks.py)
            await asyncio.wait([future], timeout=None if cancelled else left)
        except asyncio.CancelledError:
            cancelled = True
    if cancelled:
        if future.exception() is None:
            await run_to_completion(loop.run_in_executor(_GCS_CALLS, undo))
        raise asyncio.CancelledError
    return future.result()


def _undo_later(made: asyncio.Future[Any], undo: Callable[[], None]) -> None:
    if not made.cancelled() and made.exception() is not None:
        log.debug("a GCS call given up on failed", exc_info=made.exception())
    done = asyncio.get_running_loop().run_in_executor(_GCS_CALLS, undo)  # what it did make
    _undoing.add(done)
    done.add_done_callback(_undoing.discard)


def discard_group(pg: PlacementGroup | None, name: str) -> None:
    """Remove a group no one will use, once it came to rest (blocking: a GCS-call
    thread's; the settling is `GangLaunch.close`'s reason)."""
    if pg is None:
        return
    try:
        pg.wait(timeout_seconds=SETTLE_S)
    except Exception:  # noqa: BLE001 - removed or failed: removed below either way
        pass
    remove_group(pg, name)


async def ready_within(pgs: Sequence[PlacementGroup], timeout: float) -> bool:
    """Whether every group became ready within `timeout` (a group's error is raised).
    Not asyncio.wait_for: a cancellation that arrives as a group becomes ready must not be
    swallowed, or the gang would run on (`wait_within`)."""
    done, pending = await wait_within([pg.ready() for pg in pgs], timeout)
    for ready in done:
        ready.result()
    return not pending


async def settled(ref: Any) -> None:
    try:
        await ref
    except Exception:  # noqa: BLE001 - a body that raised or died has ended too
        pass


def preempt_entry(slot: MemberSlot, hooks: int = 0, error: GangError | str | None = None,
                   running: bool = False) -> dict:
    if isinstance(error, GangError):
        error = f"{error.error_type}: {error.message}"
    return {"member": f"{slot.role}-{slot.index}", "rank": slot.rank, "hooks": hooks,
            "error": error, "running": running}


def role_sizes(spec: GangSpec, world: Sequence[MemberSlot]) -> dict[str, int]:
    counts = Counter(slot.role for slot in world)
    return {role.name: counts[role.name] for role in spec.roles}
