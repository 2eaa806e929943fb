"""SchedulerConfig: priority classes and their resolution."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from raygang.control.config import SchedulerConfig
from raygang.core import (DEFAULT_PRIORITY_CLASSES, PolicyConfig, PriorityClass,
                          UnknownPriorityClass)

from tests.unit.builders import spec


@pytest.mark.parametrize(
    "priority, value",
    [("inference", 1000), ("training", 100), ("batch", 10), (0, 0), (7, 7), (-5, -5), (5000, 5000)],
)
def test_resolve_priority_with_default_classes(priority, value):
    assert SchedulerConfig().resolve_priority(spec("g", "GPU=1", priority=priority)) == value


def test_default_classes_and_preemptible_flag():
    by_name = {c.name: c for c in DEFAULT_PRIORITY_CLASSES}
    assert by_name["inference"].preemptible is False
    assert by_name["training"].preemptible is True
    assert by_name["batch"].preemptible is True
    assert by_name["inference"].value > by_name["training"].value > by_name["batch"].value


def test_unknown_class_lists_the_known_ones():
    config = SchedulerConfig()
    with pytest.raises(UnknownPriorityClass) as info:
        config.resolve_priority(spec("g", "GPU=1", priority="urgent"))
    message = str(info.value)
    assert message.startswith("priority: ")
    assert "'urgent'" in message
    assert "known: batch, inference, training" in message
    assert isinstance(info.value, ValueError)


def test_custom_classes_add_to_the_defaults_and_replace_one_of_the_same_name():
    config = SchedulerConfig(
        priority_classes=(
            PriorityClass(name="critical", value=10_000, preemptible=False),
            PriorityClass(name="scavenger", value=-1),
            PriorityClass(name="training", value=200, min_runtime_s=60),
        )
    )
    assert config.resolve_priority(spec("g", "GPU=1", priority="critical")) == 10_000
    assert config.resolve_priority(spec("g", "GPU=1", priority="scavenger")) == -1
    training = config.priority_class(spec("g", "GPU=1", priority="training"))
    assert (training.value, training.min_runtime_s) == (200, 60)
    # The defaults not named stay: deployments default to `inference`.
    assert config.resolve_priority(spec("g", "GPU=1", priority="inference")) == 1000
    assert [c.name for c in config.priority_classes] == [
        "critical", "scavenger", "training", "inference", "batch"]
    with pytest.raises(UnknownPriorityClass, match=r"known: batch, critical, inference, "
                                                   r"scavenger, training\)"):
        config.resolve_priority(spec("g", "GPU=1", priority="urgent"))


def test_config_defaults_and_validation():
    config = SchedulerConfig()
    assert config.backfill is False
    assert config.resync_interval_s > 0
    with pytest.raises(ValidationError):
        SchedulerConfig(resync_interval_s=0)
    with pytest.raises(ValidationError):
        SchedulerConfig(finished_gangs_kept=-1)
    with pytest.raises(ValidationError):
        SchedulerConfig(backfil=True)  # typo: extra fields are forbidden
    with pytest.raises(ValidationError):
        config.backfill = True  # type: ignore[misc]  # frozen


def test_config_round_trip():
    config = SchedulerConfig(backfill=True)
    assert SchedulerConfig.model_validate_json(config.model_dump_json()) == config


def test_a_policy_decides_by_time_unless_it_only_allocates_holds_nothing_and_forgets():
    """`decides_by_time`: whether a look may decide otherwise later on the same cluster
    and backlog (a replay's loop looks by the clock only then)."""
    assert PolicyConfig().decides_by_time  # reclaim and preempt wait out delays
    only = {"actions": ["allocate"], "sla_waiting_time_s": None}
    assert not PolicyConfig(**only).decides_by_time
    assert PolicyConfig(**{**only, "sla_waiting_time_s": 3600}).decides_by_time
    assert PolicyConfig(**only, usage={"enabled": True}).decides_by_time
    assert PolicyConfig(**{**only, "actions": ["allocate", "grow"]}).decides_by_time
