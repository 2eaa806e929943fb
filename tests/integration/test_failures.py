"""Every failure ends with nothing left behind and the member's error on the gang."""

from __future__ import annotations

import os
import time

import pytest
import ray

import raygang
from raygang import GangCancelledError, GangFailedError, GangState, UnschedulableError
from raygang.runtime.client.connection import scheduler
from tests.integration.helpers import wait_state


@raygang.gang_task(replicas=3, num_gpus=1)
class LoadsWeights:
    def __init__(self, bad_rank):
        if raygang.get_context().rank == bad_rank:
            raise ValueError("checkpoint shard 2 is corrupt")

    def run(self):
        return "ok"


def test_constructor_failure_fails_the_gang_and_releases_everything(ray_cluster):
    ref = LoadsWeights.remote(2)
    with pytest.raises(GangFailedError) as raised:
        ref.result(timeout=60)
    error = raised.value.status.error
    assert (error.error_type, error.member, error.rank) == ("ValueError", "loadsweights-2", 2)
    assert error.message == "checkpoint shard 2 is corrupt"
    assert "checkpoint shard 2 is corrupt" in str(raised.value)
    assert ref.status().state is GangState.FAILED


@raygang.gang_task(replicas=3, num_cpus=1)
def dies_mid_run():
    if raygang.get_context().rank == 1:
        os._exit(3)  # the worker process vanishes, as on an OOM kill
    time.sleep(60)  # the others would wait forever on a collective
    return "never"


def test_member_death_kills_the_whole_gang(ray_cluster):
    started = time.time()
    with pytest.raises(GangFailedError) as raised:
        dies_mid_run.remote().result(timeout=60)
    assert time.time() - started < 30  # the sleeping members were not waited for
    error = raised.value.status.error
    assert error.error_type == "ActorDiedError" and error.rank == 1


@raygang.gang_task(replicas=2, num_gpus=2)
class Service:
    def ping(self):
        return "pong"


def test_cancel_running_and_pending_gangs(ray_cluster):
    running = Service.remote()
    wait_state(running, GangState.RUNNING)
    assert ray.get(running.handles()["service"][0].ping.remote()) == "pong"
    # 4 GPUs held; a PACK gang of 8 GPUs cannot fit and waits, holding nothing.
    waiting = Service.options(replicas=8, num_gpus=1, strategy="PACK").remote()
    status = wait_state(waiting, GangState.PENDING)
    assert waiting.cancel().state is GangState.CANCELLED
    assert running.cancel().state is GangState.CANCELLED
    assert running.status().events[-1].reason == "cancelled by user"
    assert status.state is GangState.PENDING


@raygang.gang_task(replicas=2, num_cpus=1, max_restarts=2)
def flaky():
    ctx = raygang.get_context()
    if ctx.attempt < 2 and ctx.rank == 0:
        raise RuntimeError(f"transient failure on attempt {ctx.attempt}")
    return ctx.attempt


def test_whole_gang_restarts_up_to_max_restarts(ray_cluster):
    ref = flaky.remote()
    assert ref.result(timeout=90) == [2, 2]
    status = ref.status()
    assert status.restarts == 2
    restarts = [e for e in status.events if e.to_state is GangState.RESTARTING]
    assert [e.reason.split(" after ")[0] for e in restarts] == ["restart 1/2", "restart 2/2"]
    assert "transient failure on attempt 0" in restarts[0].reason
    # Exponential backoff between restarts: 1 s, then 2 s (restart_backoff_s=1 by default).
    requeues = [e for e in status.events if e.reason.startswith("requeued to restart whole")]
    assert [e.reason.rsplit("before ", 1)[1] for e in requeues] == ["1s from now", "2s from now"]
    admitted = [e for e in status.events if e.to_state is GangState.ADMITTED]
    assert admitted[1].at - requeues[0].at >= 1.0
    assert admitted[2].at - requeues[1].at >= 2.0


@raygang.gang_task(replicas=2, num_cpus=1, max_runtime_s=3)
def overruns():
    time.sleep(120)
    return "never"


def test_a_run_past_its_max_runtime_is_cancelled_and_frees_everything(ray_cluster):
    ref = overruns.remote()
    with pytest.raises(GangCancelledError):
        ref.result(timeout=60)
    status = ref.status()
    assert status.events[-1].reason == "ran past its max_runtime_s (3 s)"
    running = next(e for e in status.events if e.to_state is GangState.RUNNING)
    assert status.events[-1].at - running.at >= 3.0  # (the leak check follows the test)


def test_gang_that_can_never_fit_is_rejected_at_submission(ray_cluster):
    with pytest.raises(UnschedulableError) as raised:
        Service.options(replicas=5, num_gpus=1, strategy="STRICT_PACK").remote()
    message = str(raised.value)
    assert "needs {GPU: 5} on one node" in message
    assert "largest free GPU on one node is 4" in message
    with pytest.raises(UnschedulableError, match="needs 3 distinct nodes"):
        Service.options(replicas=3, num_gpus=1, strategy="STRICT_SPREAD").remote()
    with pytest.raises(UnschedulableError, match="needs resource 'TPU'"):
        Service.options(resources={"TPU": 1}).remote()
    assert not [g for g in raygang.list_gangs() if g.state is GangState.PENDING]


def test_unknown_priority_class_is_refused_with_the_known_ones(ray_cluster):
    with pytest.raises(ValueError, match="unknown priority class 'urgent'.*batch, inference"):
        Service.options(priority="urgent").remote()


def test_scheduler_loop_survives_garbage(ray_cluster):
    handle = scheduler()
    for bad in [("not a spec", {}), (None, None), (42, "x")]:
        with pytest.raises(TypeError, match=r"submit\(\) takes a GangSpec, got "):
            ray.get(handle.submit.remote(*bad))
    spec = LoadsWeights.options(replicas=1).bind(-1)
    with pytest.raises(TypeError, match="programs as a dict"):
        ray.get(handle.submit.remote(raygang.gang("g", roles={"w": spec}).spec, {"w": 3}))
    with pytest.raises(Exception, match="no gang with id"):
        ray.get(handle.status.remote("no-such-gang"))
    assert LoadsWeights.options(replicas=1).remote(-1).result(timeout=60) == ["ok"]
    assert ray.get(handle.ping.remote())["last_cycle_error"] is None
