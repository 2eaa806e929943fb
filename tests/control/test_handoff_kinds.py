"""A library's own group queued as a gang (`submit_train`): a Train run's worker group, or
a Tune trial's placement group (kind "tune"), each under its own kind, so that its status
and history say what it is; any other kind is refused before anything is queued."""

from __future__ import annotations

import pytest

from raygang.control import kinds
from raygang.core.gang import GangState as S

from tests.control.harness import make_cluster, make_plane, run
from tests.unit.builders import spec


@pytest.mark.parametrize("kind, starting", [
    ("train", "handing the nodes over to Ray Train's worker group"),
    ("tune", "handing the nodes over to the Tune trial's placement group"),
])
def test_a_handed_over_group_is_queued_under_its_kind(kind, starting):
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=4"))
        gang_id = await plane.submit_train(spec("trial", "2xGPU=1"), "job:01000000",
                                           kind=kind)
        record = plane.registry.get(gang_id)
        assert (record.kind, (await plane.status(gang_id)).kind) == (kind, kind)
        assert record.workload == {"controller": "job:01000000"}
        assert kinds.of(record.kind).phases.starting == starting
        await plane.cancel(gang_id)
        assert (await plane.wait(gang_id, timeout=5)).state is S.CANCELLED

    run(scenario)


def test_any_other_kind_is_refused_and_nothing_is_queued():
    async def scenario():
        plane = make_plane(make_cluster("n0: GPU=4"))
        with pytest.raises(ValueError, match="kind 'job': a hand-off to a library is one "
                                             "of train, tune"):
            await plane.submit_train(spec("trial", "2xGPU=1"), "c0ffee", kind="job")
        assert list(plane.registry.unfinished()) == []

    run(scenario)
