"""The elastic and preemption scenarios of this tier under many seeds, in a row.

Each seed jitters every step a run takes (control/memory.py) and so interleaves the
control plane's tasks differently; a scenario that hangs, strands a gang or leaves a
task running under some seed fails here, naming the seed, and `run(..., seed=N)` then
reproduces it exactly. The suite sweeps `RAYGANG_SEEDS` seeds (10 by default); the full
sweep is

    RAYGANG_SEEDS=200 python -m pytest tests/control/test_seeds.py
"""

from __future__ import annotations

import os

import pytest

from raygang.core.spec import Resize
from tests.control import test_elastic_runs as elastic
from tests.control import test_loop as loop
from tests.control import test_resize_races as races
from tests.control.harness import run, seeded

SEEDS = range(1, 1 + int(os.environ.get("RAYGANG_SEEDS", "10")))

SCENARIOS = {
    # elastic gangs: grown, shrunk, restarted, failing, deployments
    "elastic grows": elastic.test_an_elastic_gang_starts_at_its_minimum_and_grows_when_a_blocker_ends,
    "elastic shrinks": elastic.test_a_higher_priority_gang_shrinks_the_surplus_and_stops_no_whole_gang,
    "same queue takes back": elastic.test_a_gang_of_the_same_queue_takes_back_what_growth_took,
    "restart resize": elastic.test_a_restart_gang_stops_whole_and_starts_again_at_each_new_size,
    "restart fails": elastic.test_a_member_failing_to_start_again_fails_the_restarted_gang_whole,
    "elastic deployment": elastic.test_an_elastic_deployment_grows_on_its_node_only_and_shrinks_for_a_more_urgent_one,
    # preemption
    "preempt and requeue": loop.test_inference_preempts_training_which_requeues_with_the_same_id_and_runs_again,
    "grace ends early": loop.test_the_grace_period_ends_when_nothing_is_left_to_finish,
    "waits for victim": loop.test_a_gang_on_capacity_being_freed_waits_for_the_victim,
    "fails in grace": loop.test_a_member_failing_during_its_grace_period_requeues_the_gang_not_fails_it,
    "cancel": loop.test_cancel_a_pending_and_a_running_gang,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_a_scenario_passes_under_every_seed(name):
    for seed in SEEDS:
        with seeded(seed):
            try:
                SCENARIOS[name]()
            except BaseException as error:
                raise AssertionError(f"{name!r} failed under seed {seed}: {error}") from error


@pytest.mark.parametrize("resize", [Resize.LIVE, Resize.RESTART])
def test_an_urgent_gang_during_a_growth_under_every_seed(resize):
    for seed in SEEDS:
        delay = races.DELAYS[seed % len(races.DELAYS)]
        run(lambda: races.urgent_during_growth(delay, resize), seed=seed)
