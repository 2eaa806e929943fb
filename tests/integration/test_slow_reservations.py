"""Placement groups that take a while to be ready, on Ray: a reservation that times out, and
an urgent gang arriving while an elastic gang grows, at points of the growth.

The gangs here run on a worker of their own whose raylet answers every placement group's
bundle preparation 1 s late (Ray's `RAY_testing_asio_delay_us`, set for that raylet
only): a group there takes a second to be ready, on purpose.

- A gang whose reservation timeout is shorter than that has its group removed while Ray
  still prepares it (Ray 2.60 leaks the bundles of such a group, ray-project/ray #64693:
  raygang lets it come to rest first) and goes back to its queue; nothing is left.
- An elastic gang's growth then has a window of a second in which its new members' groups
  are being reserved. An urgent gang arrives in it, or while the new members start.
  Before resizes of a gang were serialized, a removal that came while its members
  were being reserved removed nothing (no actor yet), the members started anyway outside
  the gang's book, and the urgent gang waited for ever for room that never came (issue
  28, point 3).
"""

from __future__ import annotations

import os
import time

import pytest

import raygang
from raygang import GangState
from tests.integration.helpers import wait_state, wait_until
from tests.integration.leaks import raygang_member_actors, raygang_placement_groups

SLOW = "slow_pg"  # the custom resource only the slow worker has
DELAY_US = 1_000_000


@pytest.fixture(scope="module")
def slow_worker(cluster):
    """A worker with 4 GPUs and 4 `slow_pg`, whose raylet prepares bundles 1 s late."""
    os.environ["RAY_testing_asio_delay_us"] = (
        f"NodeManagerService.grpc_server.PrepareBundleResources={DELAY_US}:{DELAY_US}")
    try:
        node = cluster.add_node(num_cpus=2, num_gpus=4, resources={SLOW: 4})
    finally:
        del os.environ["RAY_testing_asio_delay_us"]
    cluster.wait_for_nodes()
    yield node
    cluster.remove_node(node)


@raygang.gang_task(num_gpus=1, num_cpus=0, resources={SLOW: 1}, reservation_timeout_s=0.5)
def impatient():
    return "ran"


def _admitted_twice(ref):
    status = ref.status()
    return sum(e.to_state is GangState.ADMITTED for e in status.events) > 1 and status


def test_a_reservation_not_ready_in_time_is_removed_and_the_gang_requeued(
        slow_worker, ray_cluster):
    ref = impatient.remote()
    try:
        timeout = f"placement group raygang-{ref.gang_id} was not ready within 0.5s"
        status = wait_until(lambda: _admitted_twice(ref))
        requeues = [e.reason for e in status.events
                    if e.from_state is GangState.ADMITTED and e.to_state is GangState.PENDING]
        assert requeues and timeout in requeues[0], [e.reason for e in status.events]
        assert status.restarts == 0 and status.preemptions == 0
    finally:
        ref.cancel()  # (it would time out again: every group there is a second late)


@raygang.gang_task(role="w", replicas=(1, 4), num_gpus=1, num_cpus=0,
                   resources={SLOW: 1}, preemption_grace_s=1)
class Grower:
    def __init__(self):
        time.sleep(0.3)  # each new member takes a moment to be ready


@raygang.gang_task(replicas=3, num_gpus=1, num_cpus=0, resources={SLOW: 1}, priority=500)
class Urgent:
    """Serves until cancelled."""


def _book_and_ray(gang) -> tuple[set[str], set[str], set[str]]:
    """The gang's surplus members as its book has them, as member actors in Ray, and as
    placement groups of their own in Ray."""
    status = gang.status()
    book = {f"w-{i}" for i in range(1, status.world_size)}
    prefix = f"raygang-{gang.gang_id}-"
    actors = {n[len(prefix):] for n in raygang_member_actors() if n.startswith(prefix)}
    groups = {pg["name"][len(prefix):] for pg in raygang_placement_groups()
              if pg["name"].startswith(prefix)}
    return book, actors - {"w-0"}, groups


def _settled_at(gang, size: int) -> None:
    """Until the gang runs `size` members and its book and Ray agree on them."""
    def agree():
        book, actors, groups = _book_and_ray(gang)
        return len(book) + 1 == size and book == actors == groups
    try:
        wait_until(agree, timeout=60)
    except AssertionError:
        raise AssertionError(f"book / actors / groups: {_book_and_ray(gang)}; events "
                             f"{[e.reason for e in gang.status().events[-6:]]}") from None


def test_an_urgent_gang_arriving_at_points_of_a_growth_runs_and_book_and_ray_agree(
        slow_worker, ray_cluster):
    gang = Grower.remote()
    urgent = None
    try:
        wait_state(gang, GangState.RUNNING)
        # 0: while the new members' groups are reserved; 1.5: while they start. (After the
        # growth, taking the surplus back is an elastic gang's ordinary shrink:
        # test_elastic.py and test_serve_elastic.py.)
        for delay in (0.0, 1.5):
            wait_until(lambda: gang.status().world_size > 1, poll_s=0.01)  # it grows
            time.sleep(delay)
            urgent = Urgent.remote()
            running = wait_state(urgent, GangState.RUNNING, timeout=60)
            assert not [e.reason for e in running.events if "requeued" in e.reason], \
                (delay, [e.reason for e in running.events])
            _settled_at(gang, 1)  # the growth taken back, nobody stopped whole
            assert gang.status().preemptions == 0
            urgent.cancel()
            _settled_at(gang, 4)  # grown back
    finally:
        for ref in (urgent, gang):
            if ref is not None:
                ref.cancel()
