"""A gang cancelled while its placement group is being created, on the real cluster: the
group comes to rest before it is removed (Ray 2.60 leaks it otherwise). Cancelled in the
instant after its admission: tests/control/test_loop.py (that path touches no Ray)."""

from __future__ import annotations

import asyncio

from raygang.core.gang import GangState
from raygang.runtime.scheduler.actor import Scheduler
from raygang.server.models import GangSubmission
from tests.conftest import SCHEDULER_CONFIG


def test_cancel_while_the_placement_group_is_being_created_leaks_nothing(ray_cluster):
    """Ray 2.60 leaks the bundles of a placement group removed while they are being
    prepared (ray-project/ray #64693); raygang lets such a group come to rest before it
    removes it. Cancelled at several instants of the reservation, 30 times: the leak check
    of `ray_cluster` then finds every GPU free."""
    submission = GangSubmission.model_validate({"name": "flicker", "roles": [{
        "name": "w", "replicas": 1, "resources": {"GPU": 1},
        "entrypoint": "raygang.demo:sleep", "args": [60]}]})

    async def scenario():
        plane = Scheduler(SCHEDULER_CONFIG).plane
        states = []
        for attempt in range(30):
            gang_id = await plane.submit(submission.gang_spec(), submission.programs())
            plane.loop.cycle()
            await asyncio.sleep((0, 0, 0.001, 0.002, 0.005)[attempt % 5])
            states.append((await plane.cancel(gang_id)).state)
        return plane, states

    plane, states = asyncio.run(scenario())
    assert set(states) == {GangState.CANCELLED} and not list(plane.fleet)
