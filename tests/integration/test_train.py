"""Ray Train V2 runs as raygang gangs, unchanged (`RaygangTrain`, `raygang.train`), on the
shared real cluster (2 workers x 4 virtual GPUs). Train V2 runs without torch here: a
`DataParallelTrainer` whose function reports (and checkpoints) on virtual GPUs."""

from __future__ import annotations

import json
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

import pytest
import ray
import ray.train
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer
from ray.util.placement_group import placement_group, remove_placement_group

import raygang
from raygang import GangState
from raygang.runtime.client.train_callback import RaygangTrain
from tests.integration.helpers import restart_scheduler, wait_state, wait_until


def train_func(config):
    """Report steps; write this worker's node and the step it started from; when told of a
    preemption, checkpoint at once (Train's recommended reaction) and keep going."""
    ctx = ray.train.get_context()
    start = _resumed_step()
    with Path(config["log"]).open("a") as f:
        f.write(json.dumps({"rank": ctx.get_world_rank(), "start": start,
                            "node": ray.get_runtime_context().get_node_id()}) + "\n")
    steps = start + config["more"] if start else config["steps"]
    saved = False
    for step in range(start, steps):
        time.sleep(config.get("sleep", 0.2))
        saved = _report(step, saved)


def _resumed_step() -> int:
    """The step after the last checkpoint's (0 without one)."""
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return 0
    with checkpoint.as_directory() as d:
        return json.loads(Path(d, "state.json").read_text())["step"] + 1


def _report(step: int, saved: bool) -> bool:
    """Report `step`, with a checkpoint the first time a preemption is told (`saved`: one
    was saved already); returns whether one is saved now."""
    if ray.train.get_preemption_info() is None or saved:
        ray.train.report({"step": step})
        return saved
    with tempfile.TemporaryDirectory() as d:
        Path(d, "state.json").write_text(json.dumps({"step": step}))
        ray.train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
    return True


def trainer(tmp_path: Path, name: str, workers: int = 2, **config) -> DataParallelTrainer:
    config = {"log": str(tmp_path / f"{name}.jsonl"), "steps": 3, "more": 2, **config}
    return DataParallelTrainer(
        train_func, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=workers, use_gpu=True),
        run_config=RunConfig(name=name, storage_path=str(tmp_path / "storage")))


class Fit(threading.Thread):
    """`raygang.train(...)` in a thread: it blocks like `trainer.fit()`."""

    def __init__(self, trainer, **options):
        super().__init__(daemon=True)
        self.trainer, self.options = trainer, options
        self.result = self.error = None
        self.start()

    def run(self):
        try:
            self.result = raygang.train(self.trainer, **self.options)
        except BaseException as error:  # noqa: BLE001 - reported by the test
            self.error = error

    def outcome(self, timeout: float = 120):
        self.join(timeout)
        assert not self.is_alive(), "the Train run did not end"
        if self.error is not None:
            raise self.error
        return self.result


def train_gang(name: str, timeout: float = 60) -> raygang.GangRef:
    """The raygang gang of Train run `name` (once queued)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = [g for g in raygang.list_gangs() if g.kind == "train" and g.name == name
                 and not g.finished]
        if found:
            return raygang.GangRef(found[-1].gang_id)
        time.sleep(0.2)
    raise TimeoutError(f"no Train gang {name}")


def logged(tmp_path: Path, name: str) -> list[dict]:
    path = tmp_path / f"{name}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


@raygang.gang_task(replicas=2, num_gpus=4, strategy="STRICT_SPREAD", priority=500)
class AllGpus:
    def run(self):
        time.sleep(3600)


@raygang.gang_task(num_gpus=4, priority=500)
class HalfGpus:
    def run(self):
        time.sleep(3600)


@pytest.fixture
def gangs(ray_cluster):
    refs: list = []
    yield refs
    for ref in refs:
        ref.cancel()


class StealingTrain(RaygangTrain):
    """Work outside raygang takes the nodes in the hand-off window, once: right after the
    claim, before Train creates its group, a placement group takes their GPUs."""

    def on_controller_start_worker_group(self, *, scaling_config, num_workers):
        selector = super().on_controller_start_worker_group(
            scaling_config=scaling_config, num_workers=num_workers)
        if not getattr(self, "stole", False):
            self.stole = True
            node = selector["ray.io/node-id"]
            thief = placement_group([{"GPU": 4}], name="outside-raygang",
                                    bundle_label_selector=[{"ray.io/node-id": node}],
                                    lifetime="detached")
            ray.get(thief.ready())
        return selector


def test_nodes_taken_in_the_hand_off_window_requeue_the_run_without_a_hang_or_leak(
        gangs, tmp_path, monkeypatch):
    monkeypatch.setenv("RAY_TRAIN_WORKER_GROUP_START_TIMEOUT_S", "3")  # propagated by Train
    blocker = HalfGpus.remote()  # one node left: the run's two workers must go there
    gangs.append(blocker)
    wait_state(blocker, GangState.RUNNING)
    job = trainer(tmp_path, "window")
    job.run_config.callbacks = [StealingTrain()]
    fit = Fit(job)
    run = train_gang("window")
    deadline = time.time() + 60
    while not any("hand-off failed" in (e.reason or "") for e in run.status().events):
        assert time.time() < deadline, run.status().events
        time.sleep(0.5)
    status = run.status()
    assert status.state is GangState.PENDING  # waits for the GPUs the thief holds
    thief = next(pg for pg in ray.util.placement_group_table().values()
                 if pg["name"] == "outside-raygang" and pg["state"] == "CREATED")
    remove_placement_group(ray.util.get_placement_group("outside-raygang"))
    assert thief
    result = fit.outcome()
    assert result.error is None and run.status().state is GangState.SUCCEEDED


class FreeingTrain(RaygangTrain):
    """Right after the claim, capacity frees on one of the reserved nodes: a placement
    group made outside raygang goes."""

    def on_controller_start_worker_group(self, *, scaling_config, num_workers):
        selector = super().on_controller_start_worker_group(
            scaling_config=scaling_config, num_workers=num_workers)
        remove_placement_group(ray.util.get_placement_group("outside-raygang-freed"))
        return selector


@raygang.gang_task(replicas=2, num_gpus=1, priority=500, strategy="STRICT_PACK")
class TwoGpus:
    def run(self):
        time.sleep(3600)


def test_a_run_reserved_across_two_nodes_gets_one_worker_on_each_even_if_one_frees_more(
        gangs, tmp_path, worker_node_ids):
    # One GPU free on each worker node when the run is admitted; then, in the hand-off
    # window, a second frees on one of them. Train's PACK group would put both workers
    # there (more than raygang reserved there, so refused, and the run ended) unless each
    # bundle is pinned to its node.
    three = ThreeGpus.remote()
    gangs.append(three)
    node_a = wait_state(three, GangState.RUNNING).members[0].node_id
    (node_b,) = [n for n in worker_node_ids if n != node_a]
    outside = placement_group([{"GPU": 1}], name="outside-raygang-freed", lifetime="detached",
                              bundle_label_selector=[{"ray.io/node-id": node_b}])
    try:
        ray.get(outside.ready())
        two = TwoGpus.remote()  # on node B, beside the outside group: one GPU left there
        gangs.append(two)
        wait_state(two, GangState.RUNNING)
        job = trainer(tmp_path, "split")
        job.run_config.callbacks = [FreeingTrain()]
        result = Fit(job).outcome()
    finally:
        if ray.util.placement_group_table(outside).get("state") != "REMOVED":
            remove_placement_group(outside)
    assert result.error is None
    (run,) = [g for g in raygang.list_gangs() if g.kind == "train" and g.name == "split"]
    assert run.state is GangState.SUCCEEDED
    assert sorted(m.node_id for m in run.members) == sorted([node_a, node_b])
    assert sorted(e["node"] for e in logged(tmp_path, "split")) == sorted([node_a, node_b])


def test_a_train_run_waits_for_raygang_runs_on_the_reserved_nodes_and_a_killed_controller_fails_it(
        gangs, tmp_path):
    # One Train run for both (a Train start costs ~20 CPU-s here); a run to its end under
    # raygang is the elastic test's and the preempted one's.
    blocker = AllGpus.remote()
    gangs.append(blocker)
    wait_state(blocker, GangState.RUNNING)
    fit = Fit(trainer(tmp_path, "killed", steps=10_000), queue="default")
    run = train_gang("killed")
    wait_state(run, GangState.PENDING)
    time.sleep(2)  # it keeps waiting: Train has started no worker
    status = run.status()
    assert status.state is GangState.PENDING and status.queue_position == 1
    assert "GPU" in status.reason
    assert logged(tmp_path, "killed") == []

    blocker.cancel()
    status = wait_state(run, GangState.RUNNING, timeout=90)
    reserved = sorted(m.node_id for m in status.members)
    assert len(reserved) == 2
    started = wait_until(lambda: len(found := logged(tmp_path, "killed")) == 2 and found)
    assert sorted(entry["node"] for entry in started) == reserved
    assert "Train's worker group placed on them" in [e.reason for e in run.status().events]

    from ray.util.state import list_actors

    (controller,) = list_actors(filters=[("class_name", "=", "TrainController"),
                                         ("state", "=", "ALIVE")])
    os.kill(controller.pid, signal.SIGKILL)
    status = wait_state(run, GangState.FAILED, timeout=30)
    assert status.error.error_type == "ControllerDied"
    fit.join(60)
    assert fit.error is not None  # fit() reports the dead controller


def test_an_elastic_run_whose_policy_is_not_in_place_is_admitted_at_its_maximum():
    spec = RaygangTrain(queue="team-a").gang_spec(  # outside a Train controller
        ScalingConfig(num_workers=(1, 3), use_gpu=True), num_workers=1)
    assert spec.world_size == 3 and spec.queue == "team-a" and not spec.elastic
    assert spec.bundles[0].to_dict() == {"GPU": 1.0}


def elastic_func(config):
    """Report a step every 0.2 s until the step the test writes to `stop` (every worker
    stops at the same one); log each start (world size, step resumed from); checkpoint
    once when told of a preemption (raygang resizes through Train's preemption path)."""
    ctx = ray.train.get_context()
    step = _resumed_step()
    with Path(config["log"]).open("a") as f:
        f.write(json.dumps({"rank": ctx.get_world_rank(), "world": ctx.get_world_size(),
                            "start": step}) + "\n")
    stop = Path(config["stop"])
    saved = False
    while step < (int(stop.read_text()) if stop.exists() else 10**9):
        time.sleep(0.2)
        saved = _report(step, saved)
        if ctx.get_world_rank() == 0:
            Path(config["progress"]).write_text(str(step))
        step += 1


@raygang.gang_task(replicas=3, num_gpus=1, priority=500, strategy="STRICT_PACK")
class ThreeGpus:
    def run(self):
        time.sleep(3600)


def test_an_elastic_run_is_sized_by_raygang_and_resumes_from_its_checkpoint_at_each_size(
        gangs, tmp_path):
    half = HalfGpus.remote()  # one worker node full; three GPUs of the other held
    three = ThreeGpus.remote()
    gangs += [half, three]
    wait_state(half, GangState.RUNNING)
    wait_state(three, GangState.RUNNING)
    config = {"log": str(tmp_path / "elastic.jsonl"), "stop": str(tmp_path / "stop"),
              "progress": str(tmp_path / "progress")}
    fit = Fit(DataParallelTrainer(
        elastic_func, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=(1, 2), use_gpu=True),
        run_config=RunConfig(name="elastic", storage_path=str(tmp_path / "storage"))),
        # Train keeps a checkpoint only once every rank reported it; the shrink below comes
        # right after a scheduler restart, whose watcher learns of it a poll late.
        preemption_grace_s=8)
    run = train_gang("elastic")

    def starts(world: int, n: int) -> list[dict]:
        return wait_until(lambda: len(found := [e for e in logged(tmp_path, "elastic")
                                                 if e["world"] == world]) >= n and found,
                          timeout=90, poll_s=0.2)

    # Admitted at its minimum: one GPU is free.
    (first,) = starts(1, 1)
    status = run.status()
    assert (status.state, status.world_size, status.min_size, status.max_size) == \
        (GangState.RUNNING, 1, 1, 2)
    assert first["start"] == 0 and "GPU" in status.grow_reason

    three.cancel()  # room for its surplus worker: Train restarts at 2 from its checkpoint
    grown = starts(2, 2)
    assert all(e["start"] > 0 for e in grown) and len({e["start"] for e in grown}) == 1
    status = wait_until(lambda: _noted(run.status(), "restarted at 2 members"))
    assert status.world_size == 2

    restart_scheduler()  # a restarted scheduler adopts it at the size Train runs it
    status = run.status()
    assert (status.state, status.world_size) == (GangState.RUNNING, 2), status
    assert any("adopted by the restarted scheduler" in e.reason for e in status.events)
    assert len(logged(tmp_path, "elastic")) == 3  # Train's group was left alone

    taker = ThreeGpus.options(priority=2000).remote()  # needs 3 GPUs where 2 are free
    gangs.append(taker)
    wait_state(taker, GangState.RUNNING, timeout=90)
    shrunk = starts(1, 2)[1]
    assert shrunk["start"] > grown[0]["start"]  # resumed from the checkpoint it saved
    status = run.status()
    assert status.preemptions == 0 and half.status().state is GangState.RUNNING
    assert _noted(status, "restarted at 1 members")

    Path(config["stop"]).write_text(str(int(Path(config["progress"]).read_text()) + 5))
    result = fit.outcome(timeout=60)
    assert result.error is None and run.status().state is GangState.SUCCEEDED


def _noted(status, start: str):
    """The status if one of its events starts with `start`."""
    return status if any(e.reason.startswith(start) for e in status.events) else None


def _app():
    from ray import serve

    @serve.deployment
    class Echo:
        def __call__(self, request) -> str:
            return "ok"

    return Echo.bind()


app = _app()


# Last in the module: Serve (the http_port fixture's, module-scoped) runs from here to its end.
def test_a_train_run_preempted_by_a_deployment_checkpoints_requeues_and_resumes(
        gangs, tmp_path, http_port):
    half = HalfGpus.remote()  # priority 500: inference preempts the Train run, not this
    gangs.append(half)
    wait_state(half, GangState.RUNNING)
    fit = Fit(trainer(tmp_path, "victim", steps=400, more=3), preemption_grace_s=4)
    run = train_gang("victim")
    wait_state(run, GangState.RUNNING, timeout=90)
    while not logged(tmp_path, "victim"):
        time.sleep(0.2)

    # 3 GPUs: the 2 left free beside the run are not enough, the run's are.
    deployment = raygang.deploy("infer", "tests.integration.test_train:app", num_gpus=3)
    try:
        status = wait_state(run, GangState.PENDING, timeout=60)
    except AssertionError:
        print("EVENTS", [(e.to_state.value, e.reason, e.at) for e in run.status().events])
        print("DEPLOY", [(e.to_state.value, e.reason, e.at) for e in deployment.status().events])
        raise
    assert status.preemptions == 1 and "preempted by deployment infer" in status.reason
    deployment.ready(timeout=60)
    # Train tore its worker group down itself: it holds nothing while it waits.
    time.sleep(1)
    assert run.status().state is GangState.PENDING
    assert ray.available_resources().get("GPU", 0) == 1  # 8 - 4 (HalfGpus) - 3 (infer)

    deployment.undeploy()
    result = fit.outcome(timeout=180)
    assert result.error is None
    starts = [e["start"] for e in logged(tmp_path, "victim")]
    assert starts[:2] == [0] * 2 and len(starts) == 4 and min(starts[2:]) > 0
    assert len(set(starts[2:])) == 1  # all workers resumed from the same checkpoint
    assert result.checkpoint is not None  # the one saved when preempted
    status = run.status()
    assert status.state is GangState.SUCCEEDED and status.gang_id == run.gang_id
