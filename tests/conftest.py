"""One multi-node Ray cluster per test session (starting Ray costs seconds here), shared
by the integration and end-to-end tiers; unit tests never touch it.

Head: 2 CPUs, no GPU (the scheduler actor and drivers live there), and the dashboard (it
serves Ray's Job Submission API, which raygang's job queue uses).
Two workers: 4 CPUs and 4 virtual GPUs each (8 GPUs in all), labelled as two racks of one
zone (`rack` r1 and r2, `zone` z1: tests/integration/test_topology.py; nothing else looks).
The scheduler has two team queues next to `default` (GPU quota 2 each) for queue tests;
with nothing in them they change nothing for the other tests (half the GPUs are guaranteed
to no queue, so inference in `default` may use up to 4: non-preemptible gangs run beyond a
quota only on capacity no queue is guaranteed).
Every test that uses `ray_cluster` is wrapped by a leak check: afterwards no `raygang-*`
placement group or member actor is left and the free CPUs/GPUs are back where they were.

The suite runs on two pytest-xdist workers (`-n 2` in pyproject.toml): the Ray-backed tests
wait on Ray far more than they compute, so the two halves overlap. Each worker has its own
session cluster under a Ray temp root of its own (`tests.scripts.ray_temp_root`), and runs
whole modules (`xdist_group` per module: module fixtures start once). Modules marked
`own_cluster` start clusters of their own with Ray's default ports; they form one group,
run one after another on one worker. A test marked `alone` runs while the other worker
runs nothing (`pytest_runtest_protocol` below).
"""

from __future__ import annotations

import compileall
import fcntl
import os
import tempfile
from pathlib import Path

import pytest
import ray
from ray import serve
from ray.cluster_utils import Cluster

import raygang
from raygang.runtime import serving
from tests.integration import leaks
from tests.api_server import ApiServer, start_api_server
from tests.scripts import HOUSEKEEPING, ray_temp_root

if os.environ.get("PYTEST_XDIST_WORKER"):  # before any Ray process of this worker starts
    os.environ["RAY_TMPDIR"] = ray_temp_root(os.environ["PYTEST_XDIST_WORKER"])
# Ray Train V2's controller polls its workers every 2 s, and each `ray.train.report` waits
# for that poll (a step of a test's training loop took 2 s here); its workers look for a
# preemption every 5 s. The session clusters' Train runs (their processes inherit this
# environment) poll every 0.5 s and 1 s: the Train tests wait less, and test the same
# paths. Examples, and benchmarks on clusters of their own, run Train with its defaults.
os.environ.setdefault("RAY_TRAIN_HEALTH_CHECK_INTERVAL_S", "0.5")
os.environ.setdefault("RAY_TRAIN_PREEMPTION_POLL_INTERVAL_S", "1")
# Ray's housekeeping, cheaper (tests.scripts.HOUSEKEEPING: scripts' clusters too); the
# suite is CPU-bound on 2 cores, and these two cost CPU on every node of every cluster for
# output nobody here reads so often. Each node's log monitor globs its log dir for new
# worker logs every 0.1 s below 1,000 files, hundreds of them by mid-suite: at the
# threshold 0 it does so every 0.5 s (Ray's LOG_NAME_UPDATE_INTERVAL_S). Each node's
# dashboard agent reads every process's stats every 5 s for the dashboard's node view,
# which no test reads (raygang's metrics go their own way): every 30 s.
for _knob in ("RAY_LOG_MONITOR_MANY_FILES_THRESHOLD", "REPORTER_UPDATE_INTERVAL_MS"):
    os.environ.setdefault(_knob, HOUSEKEEPING[_knob])

WORKER_GPUS = 4


def pytest_configure(config):
    # Every Ray process of the suite that runs raygang (~700 here: members, schedulers, Train
    # workers, job drivers) imports it afresh. Where PYTHONDONTWRITEBYTECODE is set (this
    # machine sets it), none writes the bytecode it compiled, so each compiled the package
    # again (~0.15 CPU-s per process for a member's imports). Compiled once here (by the
    # xdist controller, before any worker starts): every process reads the cache.
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        compileall.compile_dir(str(Path(raygang.__file__).parent), quiet=1)
SCHEDULER_CONFIG = raygang.SchedulerConfig(queues=[
    raygang.QueueSpec(name="default"),
    # Strict lines (backfill_lookahead 0) for the two teams: the simulator's faithfulness
    # test compares admission order, which best-effort lines make hang on Ray's start
    # times (tests/integration/test_sim_faithful.py); `default` keeps the default.
    raygang.QueueSpec(name="team-a", quota={"GPU": 2}, backfill_lookahead=0),
    raygang.QueueSpec(name="team-b", quota={"GPU": 2}, backfill_lookahead=0),
    # A backlog queue for the API load test: one gang runs, the rest wait for the limit.
    raygang.QueueSpec(name="load", limit={"GPU": 1}),
    # A Tune sweep's queue (tests/integration/test_tune.py): 2 trials of 2 GPUs at a time.
    raygang.QueueSpec(name="sweep", limit={"GPU": 4}),
    # Reclaim at once, as Kueue does: the defaults wait until a gang has been pending 5 min
    # and leave a gang alone for 15 min after it starts (tests/unit/test_preemption_policy.py
    # checks those rules); the tests here are about what reclaim does, in seconds.
], preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0},
    # The status page's history samples every second (30 s by default) and keeps 10 min:
    # the browser test draws a gang of a few seconds in it.
    history_interval_s=1.0, history_kept_s=600.0)


def _group(item) -> str:
    return "own-clusters" if item.get_closest_marker("own_cluster") else item.module.__name__


# Longest groups first, the milliseconds of the Ray-free tiers last: xdist hands out groups
# in collection order, and small groups at the end keep both workers busy to the finish.
# (own-clusters is about 40 % of the suite's time, the Train tests the next largest.)
_FIRST = ("own-clusters", "tests.integration.test_train")


def _rank(item) -> int:
    group = _group(item)
    if group in _FIRST:
        return _FIRST.index(group)
    if item.get_closest_marker("alone") is not None:
        # Last of all: while it runs the other worker may start nothing, which costs
        # nothing once that worker has run out of groups (mid-suite, its ~50 s did).
        return len(_FIRST) + 2
    return len(_FIRST) + (0 if group.startswith(("tests.e2e", "tests.integration")) else 1)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    items.sort(key=_rank)  # stable: a module's tests keep their order
    for item in items:
        item.add_marker(pytest.mark.xdist_group(_group(item)))


@pytest.hookimpl(hookwrapper=True, tryfirst=True)  # outside pytest-timeout's timer
def pytest_runtest_protocol(item, nextitem):
    """A test marked `alone` runs while the other xdist worker runs nothing (its module
    set-up and tear-down included): one that compares Ray's timing with a model of it
    (test_sim_faithful) measures Ray on a machine the other worker's Ray tests load to
    ~10 on 2 cores, where starts spread by seconds and its decisions flip. Every other
    test holds the machine shared; a turnstile lets an `alone` test in before new ones."""
    workerinput = getattr(item.config, "workerinput", None)
    if workerinput is None:  # one process (`-n 0`): nothing runs beside it
        yield
        return
    alone = item.get_closest_marker("alone") is not None
    locks = Path(tempfile.gettempdir()) / f"raygang-tests-{workerinput['testrunuid']}"
    locks.mkdir(exist_ok=True)
    with open(locks / "turnstile", "a") as turnstile, open(locks / "machine", "a") as machine:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        fcntl.flock(machine, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        if not alone:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        yield  # closing the files releases the locks


@pytest.fixture(scope="session")
def cluster():
    # Cluster() starts its nodes without token auth; the driver must match.
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    c = Cluster(
        initialize_head=True,
        # The dashboard serves Ray's Job Submission API (raygang's job queue uses it).
        # Its agent on a free port: examples started beside it (ray.init of a local cluster)
        # take the default 52365, and a second agent there cannot serve jobs. Metrics reach
        # the agents every 10 s (Ray's default; the metrics tests poll for them): at 2 s the
        # agents of a session cluster took 1.2 CPU-s a minute more, for the whole run.
        head_node_args={"num_cpus": 2, "num_gpus": 0, "include_dashboard": True,
                        "dashboard_port": 0, "dashboard_agent_listen_port": None},
    )
    workers = [c.add_node(num_cpus=4, num_gpus=WORKER_GPUS,
                          labels={"rack": f"r{i + 1}", "zone": "z1"}) for i in range(2)]
    ray.init(address=c.address)
    c.wait_for_nodes()
    raygang.start(SCHEDULER_CONFIG)
    c.workers = workers
    yield c
    raygang.shutdown()
    ray.shutdown()
    c.shutdown()


@pytest.fixture
def ray_cluster(cluster):
    """The shared cluster, checked for leaks after the test."""
    _scheduler_with(SCHEDULER_CONFIG)
    before = leaks.wait_until_idle(cluster_resources=True)
    yield cluster
    try:
        leaks.assert_nothing_left(before)
    finally:  # the test failed, or leaked: either way its gangs end here, not later
        leaks.cancel_unfinished()


@pytest.fixture(scope="module")
def http_port(cluster):
    """Ray Serve with one loopback proxy on a free port (others may run Serve here too);
    raygang uses the Serve it finds running. Shut down after the module."""
    yield serving.serve_on_a_free_port()
    serve.shutdown()


@pytest.fixture(scope="session")
def worker_node_ids(cluster):
    return sorted(n["NodeID"] for n in ray.nodes() if n["Alive"] and n["Resources"].get("GPU"))


def _scheduler_with(config: raygang.SchedulerConfig) -> None:
    """A test that replaced the scheduler (test_start) may have left another config."""
    handle = raygang.start(config)
    if ray.get(handle.ping.remote())["config"] != config.model_dump(mode="json"):
        raygang.shutdown()
        raygang.start(config)


@pytest.fixture(scope="session")
def api_server(cluster, tmp_path_factory) -> ApiServer:
    """The REST API (uvicorn, in a thread of this process) on the shared cluster, with
    auth on: an admin token and one token per team queue (see `tests.api_server`)."""
    server = start_api_server(tmp_path_factory.mktemp("api"))
    yield server
    server.stop()


# Where the suite's time goes (issue 28: its budget is 15 minutes here): the time of each
# module's tests (setup, call and teardown) summed, and each xdist worker's busy time, so
# that a run shows which modules to cut and whether the two workers ended together.
_MODULE_S: dict[str, float] = {}
_WORKER_S: dict[str, float] = {}


def pytest_runtest_logreport(report):
    module = report.nodeid.split("::", 1)[0]
    _MODULE_S[module] = _MODULE_S.get(module, 0.0) + report.duration
    worker = getattr(getattr(report, "node", None), "gateway", None)
    key = worker.id if worker is not None else "main"
    _WORKER_S[key] = _WORKER_S.get(key, 0.0) + report.duration


def pytest_terminal_summary(terminalreporter):
    if not _MODULE_S:
        return
    write = terminalreporter.write_line
    terminalreporter.section("time by module (setup + call + teardown)")
    for module, seconds in sorted(_MODULE_S.items(), key=lambda kv: -kv[1])[:25]:
        write(f"{seconds:8.1f}s {module}")
    write(f"{sum(_MODULE_S.values()):8.1f}s in all; busy per worker: " + ", ".join(
        f"{w} {s:.0f}s" for w, s in sorted(_WORKER_S.items())))
