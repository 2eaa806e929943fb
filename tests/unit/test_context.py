"""GangContext without Ray: it pickles (scheduler -> member), and its preemption state.

The last tests drive the members' `__raygang_preempt__` control methods as plain Python
(no actor): hook order, error reporting, a repeated signal, and, for async members, that
hooks run on the member's own event loop.
"""

from __future__ import annotations

import asyncio
import copy
import pickle
import threading
import time

import pytest
from ray import cloudpickle  # Ray's own (Ray vendors it; no dependency declares it)

from raygang.control.driver import still_finishing
from raygang.runtime.member import actor as member_module
from raygang.runtime.member import context as ctx_module
from raygang.runtime.member.actor import _AsyncControl, _SyncControl
from raygang.runtime.member.context import GangContext


def make_context(**fields) -> GangContext:
    base = dict(
        gang_id="g-1", gang_name="train", role="worker", role_rank=1, rank=2, world_size=3,
        role_sizes={"driver": 1, "worker": 2}, attempt=1, node_id="n-1",
        _role_ranks={"driver": range(0, 1), "worker": range(1, 3)},
    )
    return GangContext(**{**base, **fields})


@pytest.mark.parametrize("dumps, loads", [(pickle.dumps, pickle.loads),
                                          (cloudpickle.dumps, cloudpickle.loads)])
def test_pickle_round_trip_keeps_fields_and_starts_unpreempted(dumps, loads):
    context = make_context()
    context.on_preempt(print)
    context._signal_preempted()
    assert context.preempted

    copy_ = loads(dumps(context))

    assert copy_ == context  # every dataclass field compared; the preemption state is not
    assert (copy_.gang_id, copy_.rank, copy_.attempt, copy_.node_id) == ("g-1", 2, 1, "n-1")
    assert copy_.role_sizes == {"driver": 1, "worker": 2}
    assert copy_._role_ranks == {"driver": range(0, 1), "worker": range(1, 3)}
    assert copy_.preempted is False and copy_._preempt_callbacks == []
    assert copy_._preempted is not context._preempted
    # The unpickled context is fully usable.
    copy_.peers = ("a", "b", "c")
    assert copy_.peers_in("worker") == ("b", "c")
    assert copy_._signal_preempted() == [] and copy_.preempted


def test_copy_and_repr_leave_out_the_event():
    context = make_context()
    assert "_preempted" not in repr(context) and "callbacks" not in repr(context)
    assert copy.deepcopy(context).preempted is False
    assert copy.copy(context)._preempted is not context._preempted


def test_on_preempt_registers_in_order_and_works_as_a_decorator():
    context = make_context()
    calls = []

    @context.on_preempt
    def first():
        calls.append("first")

    async def second():
        calls.append("second")

    assert context.on_preempt(second) is second
    assert callable(first)  # the decorator returned the function itself
    assert context.preempted is False and calls == []  # registering runs nothing

    assert context._signal_preempted() == [first, second]
    assert context.preempted
    assert context._signal_preempted() is None  # only the first signal hands them out


def test_on_preempt_rejects_a_non_callable():
    with pytest.raises(TypeError, match="callable"):
        make_context().on_preempt("checkpoint")


def test_a_callback_registered_after_the_signal_runs_at_once():
    context = make_context()
    context._signal_preempted()
    calls = []
    context.on_preempt(lambda: calls.append("sync"))

    async def late_async():
        calls.append("async")

    context.on_preempt(late_async)  # no running loop here: run to completion
    assert calls == ["sync", "async"]

    async def body():
        context.on_preempt(late_async)  # a running loop: a task of it
        await asyncio.sleep(0.01)

    asyncio.run(body())
    assert calls == ["sync", "async", "async"]


def test_wait_preempted_times_out_then_sees_the_signal_from_another_thread():
    context = make_context()
    started = time.monotonic()
    assert context.wait_preempted(timeout=0.05) is False
    assert time.monotonic() - started >= 0.04
    threading.Timer(0.05, context._signal_preempted).start()
    assert context.wait_preempted(timeout=10) is True and context.preempted


# The members' control methods, called as plain Python -----------------------------------
class _UserWorker:
    def __init__(self, fail=False):
        self.calls: list[str] = []
        self.fail = fail

    def on_preempt(self):
        self.calls.append("method")
        if self.fail:
            raise ValueError("disk full")


class _SyncMember(_SyncControl, _UserWorker):
    pass


@pytest.fixture
def current_context():
    context = make_context()
    ctx_module._set_context(context)
    yield context
    ctx_module._set_context(None)


def test_sync_member_runs_its_method_then_callbacks_and_reports_errors(current_context):
    member = _SyncMember(fail=True)

    @current_context.on_preempt
    def callback():
        assert current_context.preempted  # the flag is set before any hook runs
        member.calls.append("callback")

    async def async_callback():
        member.calls.append("async callback")

    def broken():
        raise RuntimeError("no space")

    current_context.on_preempt(broken)
    current_context.on_preempt(async_callback)

    reply = member.__raygang_preempt__()

    assert reply == {"hooks": 4, "error": "ValueError: disk full; RuntimeError: no space",
                     "running": False}
    assert member.calls == ["method", "callback", "async callback"]  # a failure stops nothing
    assert member.__raygang_preempt__() == {"hooks": 0, "error": None,  # repeat: nothing
                                            "running": False}


def test_function_member_has_only_callbacks(current_context):
    class FunctionLike(_SyncControl):  # no user class, so no on_preempt method
        pass

    assert FunctionLike().__raygang_preempt__() == {"hooks": 0, "error": None,
                                                    "running": False}
    assert current_context.preempted


class _AsyncUser:
    async def on_preempt(self):
        self.hook_loop = asyncio.get_running_loop()
        self.hook_thread = threading.get_ident()


class _AsyncMember(_AsyncControl, _AsyncUser):
    pass


def test_async_member_runs_hooks_on_its_main_loop_not_the_control_loop(
    current_context, monkeypatch
):
    """As in Ray: the control group has an event loop on a thread of its own."""
    monkeypatch.setattr(member_module, "_node_id", lambda: "n-1")  # no Ray here
    member = _AsyncMember()
    member._raygang_error = None
    main_loop = asyncio.new_event_loop()
    main_thread = threading.Thread(target=main_loop.run_forever, daemon=True)
    main_thread.start()
    try:
        ready = asyncio.run_coroutine_threadsafe(member.__raygang_ready__(), main_loop)
        assert ready.result(5) == "n-1"  # and it noted its loop
        sync_hook_threads = []
        current_context.on_preempt(lambda: sync_hook_threads.append(threading.get_ident()))

        reply = asyncio.run(member.__raygang_preempt__())  # another loop, this thread

        assert reply == {"hooks": 2, "error": None, "running": False}
        assert member.hook_loop is main_loop
        assert member.hook_thread == main_thread.ident
        assert sync_hook_threads == [main_thread.ident]
    finally:
        main_loop.call_soon_threadsafe(main_loop.stop)
        main_thread.join(5)
        main_loop.close()


def test_the_reply_says_whether_the_body_is_still_running(current_context, monkeypatch):
    monkeypatch.setattr(member_module, "_node_id", lambda: "n-1")  # no Ray here
    member = _SyncMember()
    member._raygang_enter(current_context)
    assert member._raygang_running() is False  # not released yet
    release, returned = threading.Event(), threading.Event()
    member._raygang_body = lambda: lambda: (release.wait(5), returned.set())
    body = threading.Thread(target=member.__raygang_run__, args=((),))
    body.start()
    try:
        assert member.__raygang_preempt__()["running"] is True
    finally:
        release.set()
        body.join(5)
    assert returned.is_set() and member.__raygang_preempt__()["running"] is False
    service = _SyncMember()
    service._raygang_enter(current_context)
    service._raygang_body = lambda: None  # no run(): the body was the constructor
    service.__raygang_run__(())
    assert service.__raygang_preempt__()["running"] is False


@pytest.mark.parametrize("replies, waits_for", [
    ([], []),  # nothing signalled (a deployment: Serve drains its replicas itself)
    # A service without hooks: nothing in it can react.
    ([{"rank": 0, "hooks": 0, "error": None, "running": False}], []),
    # Hooks returned: that was the checkpoint, whether or not run() goes on.
    ([{"rank": 0, "hooks": 1, "error": None, "running": True}], []),
    # A body without hooks may be watching `preempted`: wait for it (rank 1 only).
    ([{"rank": 0, "hooks": 0, "error": None, "running": False},
      {"rank": 1, "hooks": 0, "error": None, "running": True}], [1]),
    # Dead, or out of time already: nothing to wait for.
    ([{"rank": 0, "hooks": 0, "error": "ActorDiedError: gone", "running": False},
      {"rank": 1, "hooks": 0, "error": "GraceTimeout: no reply within 3s", "running": False}],
     []),
])
def test_what_the_grace_period_still_waits_for(replies, waits_for):
    assert still_finishing(replies) == waits_for
