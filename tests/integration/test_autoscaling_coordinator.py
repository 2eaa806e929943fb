"""Mode `autoscaler` next to Ray Train V2 / Ray Data: they run Ray's AutoscalingCoordinator,
which calls `request_resources` with the merge of its requesters' requests every tick. That
call replaces the last request, so raygang asks through the coordinator, as requester
"raygang", and its bundles stay in the merge.

On this cluster no autoscaler reads the request; what was asked for last is in the GCS's
internal KV, where `request_resources` writes it for Ray's autoscaler (v1).
"""

from __future__ import annotations

import json
import time

import ray
from ray.autoscaler._private.constants import AUTOSCALER_RESOURCE_REQUEST_CHANNEL
from ray.autoscaler.sdk import request_resources
from ray.data._internal.cluster_autoscaler.default_autoscaling_coordinator import (
    ResourceRequestPriority,
    get_or_create_autoscaling_coordinator,
)
from ray.experimental.internal_kv import _internal_kv_get

from raygang.core.resources import Resources
from raygang.core.scale import NodeGroup, ScalePlan
from raygang.runtime.scheduler.scalers import AutoscalerScaler

GPU4 = {"CPU": 4.0, "GPU": 4.0}
TYPES = [NodeGroup("gpu4", Resources(CPU=4, GPU=4, memory=2**30))]
TRAIN = {"CPU": 1.0}


def requested() -> list[dict]:
    """What `request_resources` last asked the autoscaler for, in a total order."""
    raw = _internal_kv_get(AUTOSCALER_RESOURCE_REQUEST_CHANNEL)
    return sorted(json.loads(raw or "[]"), key=lambda b: sorted(b.items()))


def tick(coordinator) -> None:
    """One coordinator tick now (merge, send, purge) rather than in up to 20 s."""
    ray.get(coordinator.get_reserved_resources.remote("raygang", recompute=True), timeout=30)


def wait_gone(name: str, namespace: str, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            ray.get_actor(name, namespace=namespace)
        except ValueError:
            return
        assert time.monotonic() < deadline, f"{namespace}/{name} still alive"
        time.sleep(0.1)


def fresh_coordinator():
    """A coordinator with no requester yet. One that a Train run earlier in this session
    started keeps that run's request until it expires; it is replaced."""
    try:
        old = ray.get_actor("AutoscalingCoordinator", namespace="AutoscalingCoordinator")
    except ValueError:
        pass
    else:
        ray.kill(old, no_restart=True)
        wait_gone("AutoscalingCoordinator", "AutoscalingCoordinator")
    return get_or_create_autoscaling_coordinator()


def test_the_coordinators_merge_keeps_raygangs_request(cluster):
    coordinator = fresh_coordinator()
    try:
        tick(coordinator)  # started (a cold actor may take longer than a scale step waits)
        # Without the fix: a request made directly is wiped by the coordinator's next tick.
        request_resources(bundles=[GPU4])
        tick(coordinator)
        assert requested() == []

        # A "raygang" request of other options (an older raygang) is replaced, not an error.
        ray.get(coordinator.request_resources.remote(
            requester_id="raygang", resources=[{"CPU": 99.0}], expire_after_s=60))
        scaler = AutoscalerScaler(lambda up: TYPES)  # the default: through the coordinator
        plan = ScalePlan(desired={"gpu4": 2})
        assert scaler.apply(plan, TYPES, {}, waiting=True) == ["request_resources: 2×gpu4"]
        assert requested() == [GPU4, GPU4]

        # Train asks for its own; the merge (sent at once and on every tick) has both.
        ray.get(coordinator.request_resources.remote(
            requester_id="train-x", resources=[TRAIN], expire_after_s=60,
            priority=ResourceRequestPriority.HIGH))
        assert requested() == [TRAIN, GPU4, GPU4]
        tick(coordinator)
        assert requested() == [TRAIN, GPU4, GPU4]

        # Nothing waits: only raygang's bundles go.
        assert scaler.apply(plan, TYPES, {}, waiting=False) == ["request_resources cleared"]
        assert requested() == [TRAIN]
        tick(coordinator)
        assert requested() == [TRAIN]
        ray.get(coordinator.cancel_request.remote("train-x"))
        assert requested() == []
    finally:
        ray.kill(coordinator, no_restart=True)  # detached: it would outlive the session
        wait_gone("AutoscalingCoordinator", "AutoscalingCoordinator")

    # Clearing when there is no coordinator does not start one.
    assert AutoscalerScaler(lambda up: TYPES).apply(plan, TYPES, {}, waiting=False) == [
        "request_resources cleared"]
    wait_gone("AutoscalingCoordinator", "AutoscalingCoordinator", timeout=0)


def test_an_unchanged_request_is_renewed_before_the_coordinator_forgets_it():
    sent, now = [], [0.0]
    scaler = AutoscalerScaler(lambda up: TYPES, request=sent.append, clock=lambda: now[0],
                              refresh_s=60)
    plan = ScalePlan(desired={"gpu4": 1})
    assert scaler.apply(plan, TYPES, {}, waiting=True) == ["request_resources: 1×gpu4"]
    now[0] = 59.0
    assert scaler.apply(plan, TYPES, {}, waiting=True) == [] and len(sent) == 1
    now[0] = 60.0
    assert scaler.apply(plan, TYPES, {}, waiting=True) == []  # renewed, not logged
    assert sent == [[GPU4], [GPU4]]
    assert scaler.apply(plan, TYPES, {}, waiting=False) == ["request_resources cleared"]
    now[0] = 1000.0
    assert scaler.apply(plan, TYPES, {}, waiting=False) == []  # a clear is not renewed
    assert sent[-1] == [] and len(sent) == 3


def test_a_failed_request_is_sent_again_at_the_next_step():
    sent = []

    def flaky(bundles):
        sent.append(bundles)
        if len(sent) == 1:
            raise TimeoutError("coordinator busy")

    scaler = AutoscalerScaler(lambda up: TYPES, request=flaky)
    plan = ScalePlan(desired={"gpu4": 1})
    try:
        scaler.apply(plan, TYPES, {}, waiting=True)
    except TimeoutError:
        pass  # ScaleDriver.step logs it and keeps it as `last_error`
    else:
        raise AssertionError("the failure is the scale step's to record")
    assert scaler.apply(plan, TYPES, {}, waiting=True) == ["request_resources: 1×gpu4"]
    assert sent == [[GPU4], [GPU4]]
