"""The graceful preemption signal, member side and launcher side, on real Ray.

The scheduler's preemption path is not driven here: the tests call the members' control
method `__raygang_preempt__` on the handles of running gangs, and drive
`GangLaunch.signal_preempt` on a launch made in the driver. A member whose run() returns
after the signal ends its gang SUCCEEDED, which is what the tests observe.

Each member holds its result back until the driver has the reply of the signal (`finish()`
or a post on a board): once run() returns the gang ends and its members are killed, which
could otherwise beat the reply (a real preemption kills them after the grace anyway).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid

import ray

import raygang
from raygang import GangState
from raygang.control.program import RoleProgram
from raygang.core.spec import gang_spec
from raygang.runtime.kinds.gang.launch import GangLaunch
from tests.integration.helpers import wait_state

LIMIT_S = 120  # a member never outlives a broken test for long
TIMEOUT = 120  # generous: another suite may share these 2 cores


@raygang.gang_task(replicas=2, num_cpus=1, max_concurrency=2)  # finish() while run() is busy
class Checkpointing:
    """run() loops until preempted; on_preempt() 'checkpoints' on the control thread."""

    def __init__(self):
        self.checkpointed = threading.Event()
        self.released = threading.Event()
        self.begun = threading.Event()
        self.hook_thread = None

    def finish(self):
        self.released.set()

    def begun_within(self, timeout_s: float) -> bool:
        return self.begun.wait(timeout_s)

    def run(self):
        self.begun.set()
        ctx = raygang.get_context()
        deadline = time.time() + LIMIT_S
        steps = 0
        while not ctx.preempted and time.time() < deadline:
            steps += 1
            time.sleep(0.02)
        self.checkpointed.wait(30)  # the flag is set before the hook runs
        self.released.wait(LIMIT_S)
        return {
            "preempted": ctx.preempted, "checkpointed": self.checkpointed.is_set(),
            "hook_on_other_thread": self.hook_thread not in (None, threading.get_ident()),
            "steps": steps,
        }

    def on_preempt(self):
        self.hook_thread = threading.get_ident()
        self.checkpointed.set()


def _preempt_all(ref, role):
    handles = ref.handles()[role]
    return ray.get([h.__raygang_preempt__.remote() for h in handles], timeout=TIMEOUT), handles


def _wait_begun(ref, role):
    """RUNNING means every member was released; on a loaded machine a body may not have
    begun when the signal arrives (then the reply says it is not running): wait for it."""
    handles = ref.handles()[role]
    assert all(ray.get([h.begun_within.remote(TIMEOUT) for h in handles], timeout=TIMEOUT))


def _finish(handles):
    ray.get([h.finish.remote() for h in handles], timeout=TIMEOUT)


def test_class_member_sees_preempted_and_its_on_preempt_runs(ray_cluster):
    ref = Checkpointing.remote()
    try:
        wait_state(ref, GangState.RUNNING, timeout=TIMEOUT)
        _wait_begun(ref, "checkpointing")
        replies, handles = _preempt_all(ref, "checkpointing")
        assert replies == [{"hooks": 1, "error": None, "running": True}] * 2
        # Only the first signal runs hooks.
        assert ray.get(handles[0].__raygang_preempt__.remote(), timeout=TIMEOUT) == {
            "hooks": 0, "error": None, "running": True}
        _finish(handles)
        results = ref.result(timeout=TIMEOUT)  # run() returned: the gang succeeds
        for result in results:
            assert result["preempted"] and result["checkpointed"]
            assert result["hook_on_other_thread"]  # the signal ran while run() was busy
        assert ref.status().state is GangState.SUCCEEDED
    finally:
        ref.cancel()


@raygang.gang_task(num_cpus=1)
class AsyncCheckpointing:
    """An async member: on_preempt() sets the asyncio.Event that run() awaits."""

    def __init__(self):
        self.stop = asyncio.Event()
        self.released = asyncio.Event()
        self.begun = asyncio.Event()
        self.hook_loop = None

    async def begun_within(self, timeout_s: float) -> bool:
        await asyncio.wait_for(self.begun.wait(), timeout_s)
        return True

    async def finish(self):
        self.released.set()

    async def run(self):
        self.begun.set()
        await asyncio.wait_for(self.stop.wait(), LIMIT_S)
        await asyncio.wait_for(self.released.wait(), LIMIT_S)
        return {"preempted": raygang.get_context().preempted,
                "hook_on_run_loop": self.hook_loop is asyncio.get_running_loop()}

    async def on_preempt(self):
        self.hook_loop = asyncio.get_running_loop()
        self.stop.set()


def test_async_member_hook_runs_on_the_loop_of_run(ray_cluster):
    ref = AsyncCheckpointing.remote()
    try:
        wait_state(ref, GangState.RUNNING, timeout=TIMEOUT)
        _wait_begun(ref, "asynccheckpointing")
        replies, handles = _preempt_all(ref, "asynccheckpointing")
        assert replies == [{"hooks": 1, "error": None, "running": True}]
        _finish(handles)
        assert ref.result(timeout=TIMEOUT) == [{"preempted": True, "hook_on_run_loop": True}]
    finally:
        ref.cancel()


@ray.remote(num_cpus=0)
class Board:
    """Where function members post what happened (they have no methods to ask)."""

    def __init__(self):
        self.posts = []

    def post(self, what):
        self.posts.append(what)

    def read(self):
        return list(self.posts)


@raygang.gang_task(replicas=2, num_cpus=1)
def train_steps(board):
    ctx = raygang.get_context()
    ran = threading.Event()

    @ctx.on_preempt
    def save():
        board.post.remote(f"saved-{ctx.rank}")
        ran.set()

    board.post.remote(f"registered-{ctx.rank}")
    seen = ctx.wait_preempted(timeout=LIMIT_S)
    ran.wait(30)
    _wait_posts(board, {"finish"}, LIMIT_S)
    return {"seen": seen, "preempted": ctx.preempted, "callback_ran": ran.is_set()}


def _wait_posts(board, expected, timeout=TIMEOUT):
    deadline = time.time() + timeout
    while not expected <= set(posts := ray.get(board.read.remote())):
        assert time.time() < deadline, f"posts {posts}, wanted {expected}"
        time.sleep(0.05)


def test_function_gang_callback_runs_and_body_sees_preempted(ray_cluster):
    board = Board.remote()
    ref = train_steps.remote(board)
    try:
        wait_state(ref, GangState.RUNNING, timeout=TIMEOUT)
        _wait_posts(board, {"registered-0", "registered-1"})  # callbacks are in place
        replies, _ = _preempt_all(ref, "train_steps")
        assert replies == [{"hooks": 1, "error": None, "running": True}] * 2
        ray.get(board.post.remote("finish"))
        assert ref.result(timeout=TIMEOUT) == [
            {"seen": True, "preempted": True, "callback_ran": True}] * 2
        _wait_posts(board, {"saved-0", "saved-1"})
    finally:
        ref.cancel()
        ray.kill(board)


@raygang.gang_task(replicas=1, num_cpus=1)
async def async_train(board):
    ctx = raygang.get_context()
    saved = asyncio.Event()

    @ctx.on_preempt
    async def save():
        await asyncio.sleep(0)
        saved.set()  # safe: the hook runs on this body's own loop

    board.post.remote("registered")
    await asyncio.to_thread(ctx.wait_preempted, LIMIT_S)
    await asyncio.wait_for(saved.wait(), 30)
    await asyncio.to_thread(_wait_posts, board, {"finish"}, LIMIT_S)
    return ctx.preempted


def test_async_function_gang_async_callback(ray_cluster):
    board = Board.remote()
    ref = async_train.remote(board)
    try:
        wait_state(ref, GangState.RUNNING, timeout=TIMEOUT)
        _wait_posts(board, {"registered"})
        replies, _ = _preempt_all(ref, "async_train")
        assert replies == [{"hooks": 1, "error": None, "running": True}]
        ray.get(board.post.remote("finish"))
        assert ref.result(timeout=TIMEOUT) == [True]
    finally:
        ref.cancel()
        ray.kill(board)


@raygang.gang_task(num_cpus=1, max_concurrency=2)
class BadCheckpoint:
    """on_preempt() raises; a callback registered in __init__ must still run."""

    def __init__(self):
        self.saved = threading.Event()
        self.released = threading.Event()
        self.begun = threading.Event()
        raygang.get_context().on_preempt(self.saved.set)  # in place before RUNNING

    def finish(self):
        self.released.set()

    def begun_within(self, timeout_s: float) -> bool:
        return self.begun.wait(timeout_s)

    def run(self):
        self.begun.set()
        raygang.get_context().wait_preempted(LIMIT_S)
        self.released.wait(LIMIT_S)
        return self.saved.wait(30)

    def on_preempt(self):
        raise ValueError("disk full")


def test_raising_hook_is_reported_not_raised(ray_cluster):
    ref = BadCheckpoint.remote()
    try:
        wait_state(ref, GangState.RUNNING, timeout=TIMEOUT)
        _wait_begun(ref, "badcheckpoint")
        replies, handles = _preempt_all(ref, "badcheckpoint")
        assert replies == [{"hooks": 2, "error": "ValueError: disk full", "running": True}]
        _finish(handles)
        assert ref.result(timeout=TIMEOUT) == [True]  # the member lived on; run() returned
        assert ref.status().state is GangState.SUCCEEDED
    finally:
        ref.cancel()


@raygang.gang_task(replicas=2, num_cpus=1)
class Server:
    """A service member (no run()): the scheduler's watch holds a control slot."""

    def __init__(self):
        self.saved = False

    def on_preempt(self):
        self.saved = True

    def state(self):
        return self.saved, raygang.get_context().preempted


def test_service_member_gets_the_signal_while_watched(ray_cluster):
    ref = Server.remote()
    try:
        ref.ready(timeout=TIMEOUT)
        replies, handles = _preempt_all(ref, "server")
        # A service's body is its constructor: nothing of it is running any more.
        assert replies == [{"hooks": 1, "error": None, "running": False}] * 2
        assert ray.get([h.state.remote() for h in handles], timeout=TIMEOUT) == [(True, True)] * 2
        assert ref.status().state is GangState.RUNNING  # the signal stops nothing
    finally:
        assert ref.cancel().state is GangState.CANCELLED


# GangLaunch.signal_preempt, on a launch made in the driver --------------------------------
class SlowHook:
    """A service member (no run()) whose hook takes `delays[rank]` seconds."""

    def __init__(self, delays):
        self.delay = delays[raygang.get_context().rank]

    def on_preempt(self):
        time.sleep(self.delay)

    def preempted(self):
        return raygang.get_context().preempted


async def _dead(handle) -> None:
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        try:
            await handle.preempted.remote()
        except ray.exceptions.RayActorError:
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the killed member still answers")


def test_launcher_signal_preempt_waits_at_most_the_grace(ray_cluster, worker_node_ids):
    spec = gang_spec("test", name="preempt-launch",
                     roles=[{"name": "r", "replicas": 2, "resources": {"CPU": 1}}])
    programs = {"r": RoleProgram(target=SlowHook, args=([0, 600],))}
    launch = GangLaunch(f"pt-{uuid.uuid4().hex[:8]}", spec, programs,
                        nodes=[worker_node_ids[0]] * 2, attempt=0)

    async def scenario():
        await asyncio.wait_for(launch.reserve(), TIMEOUT)
        await asyncio.wait_for(launch.start_members(), TIMEOUT)
        fast, slow = launch.handles

        # No grace: nothing is sent.
        assert await launch.signal_preempt(0) == []
        assert await fast.preempted.remote() is False

        # rank 0 answers at once, rank 1's hook outlasts the grace.
        started = time.monotonic()
        replies = await launch.signal_preempt(3)
        waited = time.monotonic() - started
        assert replies == [
            {"member": "r-0", "rank": 0, "hooks": 1, "error": None, "running": False},
            {"member": "r-1", "rank": 1, "hooks": 0, "running": False,
             "error": "GraceTimeout: no reply within 3s"},
        ]
        assert 3 <= waited < 3 + 10
        assert await slow.preempted.remote() is True  # its hook is still running

        # A dead member is reported; a repeat answers at once with no hooks: no waiting.
        ray.kill(fast, no_restart=True)  # asynchronous: a call may still beat it
        await _dead(fast)
        started = time.monotonic()
        replies = await launch.signal_preempt(60)
        assert time.monotonic() - started < 30
        assert replies[1] == {"member": "r-1", "rank": 1, "hooks": 0, "error": None,
                              "running": False}
        assert replies[0]["member"] == "r-0" and replies[0]["hooks"] == 0
        assert replies[0]["error"].startswith("ActorDiedError: ")

    try:
        asyncio.run(scenario())
    finally:
        asyncio.run(launch.teardown())
