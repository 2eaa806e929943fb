"""A Tune trial's resource request as a raygang gang (`raygang.runtime.client.tune`)."""

from __future__ import annotations

from ray.tune import PlacementGroupFactory

from raygang.core.spec import Strategy
from raygang.runtime.client.tune import trial_gang_spec


def test_equal_bundles_are_one_role_in_tune_order():
    request = PlacementGroupFactory([{"CPU": 1}, {"GPU": 2}, {"GPU": 2}, {"CPU": 1}],
                                    strategy="SPREAD")
    spec = trial_gang_spec(request, "sweep-1", "sweep", "batch")
    assert [(r.replicas, dict(r.resources)) for r in spec.roles] == [
        (1, {"CPU": 1.0}), (2, {"GPU": 2.0}), (1, {"CPU": 1.0})]
    assert [dict(b) for b in spec.bundles] == request.bundles
    assert spec.strategy is Strategy.SPREAD
    assert (spec.name, spec.queue) == ("sweep-1", "sweep")


def test_an_empty_head_bundle_is_not_reserved():
    request = PlacementGroupFactory([{}, {"GPU": 1}])
    spec = trial_gang_spec(request, "t", "default", "training")
    assert [dict(b) for b in spec.bundles] == [{"GPU": 1.0}]
