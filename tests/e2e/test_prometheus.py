"""Every dashboard query and alert expression returns data from a real Prometheus that
scrapes the session's Ray cluster running raygang (issue 33).

Debian's `prometheus` runs on a loopback port with a config of its own: it finds Ray's
metrics endpoints through the service-discovery file Ray writes in its session directory
(as Ray's own Prometheus config does) and loads raygang's rules file. A small workload
makes every counter move: an elastic gang grows (a resize), a gang restarts after a
failure, a batch gang is preempted by a training gang, and team-b's borrowed GPUs are
reclaimed by team-a. Then every query is evaluated through the HTTP API.

What is evaluated:
- a panel's query with the dashboard's variables set: `$SessionName` to this session's,
  `$Queue` and `$Resource` to all (`.+`, the variables' "All"), `$__rate_interval` to
  2m (Grafana's is at least four scrape intervals; 2m covers the whole workload);
- an alert's `watched` query: the series it puts a threshold on (a threshold not crossed
  in a test would hide a renamed metric); the full expressions must evaluate too, and the
  two that say something is down (no scheduler, no GCS) must be empty here;
- a variable's `label_values(...)` through the label-values API.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest
import ray

import raygang
from raygang import GangState
from raygang.ops import alerts, dashboards
from raygang.ops.__main__ import MONITORING
from raygang.runtime.ports import free_port
from tests.integration.helpers import wait_state, wait_until

DEADLINE_S = 60  # metrics reach the agents every 10 s, Prometheus scrapes every 1 s
RATE_WINDOW = "2m"

pytestmark = pytest.mark.skipif(
    shutil.which("prometheus") is None,
    reason="Debian's prometheus is not installed (apt-get install prometheus; .ci/run "
           "installs it)")


@raygang.gang_task(role="worker", replicas=(1, 2), num_gpus=1, num_cpus=0)
class Elastic:
    """Holds its GPUs until cancelled; grows to 2 members when there is room."""


@raygang.gang_task(replicas=1, num_cpus=1, max_restarts=1)
def flaky():
    if raygang.get_context().attempt == 0:
        raise RuntimeError("first attempt fails")
    return "second attempt"


@raygang.gang_task(replicas=2, num_gpus=4, num_cpus=0, priority="batch",
                   preemption_grace_s=0)
class Hog:
    """Every GPU, at the lowest priority."""


@raygang.gang_task(replicas=1, num_gpus=1, num_cpus=0, priority="training")
def urgent():
    return "ran"


@raygang.gang_task(replicas=1, num_gpus=4, num_cpus=0, preemption_grace_s=0)
class Borrower:
    """A team's 4 GPUs on one node, until cancelled."""


@pytest.fixture
def prometheus(ray_cluster, tmp_path):
    """Prometheus scraping the session's cluster every second; its base URL."""
    node = ray._private.worker.global_worker.node
    discovery = Path(node.get_session_dir_path()) / "prom_metrics_service_discovery.json"
    wait_until(lambda: discovery.exists() and json.loads(discovery.read_text()), timeout=30)
    config = tmp_path / "prometheus.yml"
    config.write_text(json.dumps({  # JSON is YAML
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(MONITORING / "raygang.rules.yaml")],
        "scrape_configs": [{"job_name": "ray",
                            "file_sd_configs": [{"files": [str(discovery)],
                                                 "refresh_interval": "5s"}]}],
    }))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url), timeout=30)
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def _ready(url: str) -> bool:
    try:
        return urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200
    except OSError:
        return False


def _api(url: str, path: str, **params: str) -> object:
    query = urllib.parse.urlencode(params)
    with urllib.request.urlopen(f"{url}/api/v1/{path}?{query}", timeout=10) as reply:
        body = json.load(reply)
    assert body["status"] == "success", body
    return body["data"]


def _series(url: str, expr: str) -> list[dict]:
    data = _api(url, "query", query=expr)
    assert data["resultType"] == "vector", (expr, data)
    return data["result"]


def _workload(refs: list) -> None:
    """A resize, a restart, a preemption and a reclaim, one after another (each needs
    the GPUs the one before held)."""
    restarting = flaky.remote()
    refs.append(restarting)
    grown = Elastic.remote()
    refs.append(grown)
    wait_until(lambda: grown.status().world_size == 2, timeout=60)
    grown.cancel()
    assert restarting.result(timeout=60) == ["second attempt"]

    hog = Hog.remote()
    refs.append(hog)
    wait_state(hog, GangState.RUNNING)
    assert urgent.remote().result(timeout=60) == ["ran"]
    assert hog.status().preemptions == 1
    hog.cancel()

    # team-b (quota 2 GPUs) borrows all 8; team-a asks for its quota: reclaimed.
    borrowed = [Borrower.options(name=f"b-{i}", queue="team-b").remote() for i in range(2)]
    refs += borrowed
    for ref in borrowed:
        wait_state(ref, GangState.RUNNING)
    owed = Borrower.options(name="a", queue="team-a", num_gpus=2).remote()
    refs.append(owed)
    wait_state(owed, GangState.RUNNING)
    assert sum(ref.status().preemptions for ref in borrowed) == 1
    for ref in refs:
        ref.cancel()


def _panel_queries(session: str) -> list[tuple[str, str]]:
    found = []
    for board in dashboards.BOARDS:
        for title, expr in dashboards.queries(dashboards.dashboard(board)):
            expr = (expr.replace("$SessionName", session).replace("$Queue", ".+")
                    .replace("$Resource", ".+").replace("$__rate_interval", RATE_WINDOW))
            assert "$" not in expr, expr  # a variable the test does not know
            found.append((f"{board.name}: {title}", expr))
    return found


def test_every_panel_and_alert_query_returns_series_from_a_real_prometheus(prometheus):
    refs: list = []
    try:
        _workload(refs)
    finally:
        for ref in refs:
            ref.cancel()
    session = ray._private.worker.global_worker.node.session_name
    queries = _panel_queries(session) + [(f"alert {a.name}", a.watched)
                                         for a in alerts.ALERTS]
    # The workload's preemptions, as the counters say them (not only that names exist).
    stopped = {("preempt", "in_queue"), ("reclaim", "other_queue")}
    by_action = ("sum by (action, reason) (ray_raygang_preempted_gangs_total"
                 f'{{SessionName="{session}"}})')
    deadline = time.time() + DEADLINE_S
    while True:  # until every counter moved by the workload has reached Prometheus
        empty = [(where, expr) for where, expr in queries if not _series(prometheus, expr)]
        counted = {(s["metric"]["action"], s["metric"]["reason"])
                   for s in _series(prometheus, by_action) if float(s["value"][1]) >= 1}
        if (not empty and stopped <= counted) or time.time() > deadline:
            break
        time.sleep(1)
    assert not empty, "queries without series:\n" + "\n".join(f"{w}: {e}" for w, e in empty)
    assert stopped <= counted, counted

    for board in dashboards.BOARDS:
        for variable in dashboards.dashboard(board)["templating"]["list"]:
            if variable["type"] != "query":
                continue
            label, metric = dashboards.VARIABLES[variable["name"]]
            values = _api(prometheus, f"label/{label}/values", **{"match[]": metric})
            assert values, f"{board.name}: variable {variable['name']} has no values"

    # The rules file loaded, every rule evaluates, and nothing is down here.
    groups = _api(prometheus, "rules")["groups"]
    rules = {r["name"]: r for g in groups for r in g["rules"]}
    assert set(rules) == {a.name for a in alerts.ALERTS}
    wait_until(lambda: all(r["health"] == "ok" for g in _api(prometheus, "rules")["groups"]
                           for r in g["rules"]), timeout=10)
    for alert in alerts.ALERTS:
        fired = _series(prometheus, alert.expr)
        if alert.name in ("RaygangSchedulerDown", "RaygangGcsUnreachable"):
            assert fired == [], (alert.name, fired)
