"""A Tune trial's resource request as a raygang gang, and what its actor is started with
(`raygang.runtime.client.tune`)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

from ray.tune import PlacementGroupFactory

from raygang.core.spec import Strategy
from raygang.runtime.client.train_callback import RaygangTrain
from raygang.runtime.client.tune import trial_env, trial_gang_spec


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


def test_a_trials_env_names_raygangs_train_callback_once_and_keeps_the_drivers(monkeypatch):
    monkeypatch.setenv("RAY_TRAIN_CALLBACKS", "my.Callback, raygang.RaygangTrain")
    env = trial_env("sweep", 50)
    assert env == {"RAY_TRAIN_CALLBACKS": "my.Callback,raygang.RaygangTrain",
                   "RAYGANG_QUEUE": "sweep", "RAYGANG_PRIORITY": "50"}
    monkeypatch.delenv("RAY_TRAIN_CALLBACKS")
    assert trial_env("q", "batch")["RAY_TRAIN_CALLBACKS"] == "raygang.RaygangTrain"


def test_the_train_callback_from_the_env_stands_down_for_one_in_the_run_config(monkeypatch):
    """Train builds one from RAY_TRAIN_CALLBACKS beside the one `raygang.train` put in the
    run's config: only the latter queues the worker group (each is a copy, once sent to
    Train's controller: they are told apart by key)."""
    monkeypatch.setenv("RAYGANG_QUEUE", "sweep")
    given, from_env = RaygangTrain(queue="team-a"), RaygangTrain()
    assert from_env.queue == "sweep"
    sent = [pickle.loads(pickle.dumps(c)) for c in (given, from_env)]
    context = SimpleNamespace(run_config=SimpleNamespace(callbacks=[sent[0]], name="run"),
                              scaling_config=SimpleNamespace(elasticity_enabled=False))
    for callback in sent:
        callback.after_controller_start(context)
    assert not sent[0]._inert and sent[1]._inert
    assert sent[1].on_controller_start_worker_group(scaling_config=None, num_workers=1) is None
    alone = pickle.loads(pickle.dumps(RaygangTrain()))
    alone.after_controller_start(SimpleNamespace(run_config=SimpleNamespace(
        callbacks=[], name="run"), scaling_config=SimpleNamespace(elasticity_enabled=False)))
    assert not alone._inert and alone.name == "run"
