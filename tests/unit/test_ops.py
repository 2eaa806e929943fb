"""manifests/monitoring/: the dashboards and alert rules are what `raygang.ops` generates,
name only metrics (and labels) the scheduler exports, and load in Prometheus (promtool).
No Ray cluster: the metric names come from `SchedulerMetrics` made with fake metric
objects. tests/e2e/test_prometheus.py evaluates the same queries on a real Prometheus."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from raygang.ops import alerts, dashboards
from raygang.ops.__main__ import MONITORING, generated
from raygang.runtime.scheduler.metrics import SchedulerMetrics

RAY_LABELS = {"SessionName", "instance", "job", "Component", "NodeAddress", "Version",
              "WorkerId"}  # what Ray's exporter and Prometheus add to every series
SELECTOR = re.compile(r"\b([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def exported() -> dict[str, set[str]]:
    """Every series name raygang exports as Prometheus shows it, and its labels."""
    made: dict[str, tuple[str, tuple[str, ...]]] = {}

    def maker(kind):
        def make(name, description="", boundaries=None, tag_keys=()):
            made[name] = (kind, tuple(tag_keys))
            return SimpleNamespace(set=None, inc=None, observe=None)
        return make

    SchedulerMetrics(SimpleNamespace(Gauge=maker("gauge"), Counter=maker("counter"),
                                     Histogram=maker("histogram")))
    names: dict[str, set[str]] = {}
    for name, (kind, tags) in made.items():
        series = ([f"{name}_bucket", f"{name}_count", f"{name}_sum"]
                  if kind == "histogram" else [name])
        for s in series:
            names[f"ray_{s}"] = set(tags) | ({"le"} if s.endswith("_bucket") else set())
    return names


def metrics_and_labels(expr: str) -> tuple[set[str], set[str]]:
    """The metric names an expression selects (each must be written `name{...}` or be a
    bare `ray_raygang_*` name) and the labels it matches or groups by."""
    metrics, labels = set(), set()
    for name, matchers in SELECTOR.findall(expr):
        metrics.add(name)
        labels |= set(MATCHER.findall(matchers))
    metrics |= set(re.findall(r"\bray_[a-zA-Z0-9_:]+", expr))
    for group in GROUPING.findall(expr):
        labels |= {label.strip() for label in group.split(",") if label.strip()}
    return metrics, labels


def every_query() -> list[tuple[str, str]]:
    found = [(f"{b.name}: {title}", expr) for b in dashboards.BOARDS
             for title, expr in dashboards.queries(dashboards.dashboard(b))]
    found += [(f"variable {v['name']}", v["query"]["query"])
              for b in dashboards.BOARDS
              for v in dashboards.dashboard(b)["templating"]["list"] if "query" in v
              and isinstance(v["query"], dict)]
    return found + [(f"alert {a.name}", a.expr) for a in alerts.ALERTS]


def test_the_committed_files_are_what_raygang_ops_generates():
    for path, text in generated().items():
        assert path.exists(), f"{path} missing: run python -m raygang.ops"
        assert path.read_text() == text, f"{path} is stale: run python -m raygang.ops"


def test_every_query_names_only_metrics_and_labels_raygang_exports():
    names = exported()
    seen: set[str] = set()
    for where, expr in every_query():
        label_values = re.fullmatch(r"label_values\((\w+)(\{[^}]*\})?, (\w+)\)", expr)
        metrics, labels = metrics_and_labels(expr)
        if label_values:
            labels.add(label_values.group(3))
        assert metrics, f"{where}: no metric in {expr}"
        unknown = metrics - names.keys()
        assert not unknown, f"{where}: {sorted(unknown)} not exported by raygang: {expr}"
        allowed = set.union(*(names[m] for m in metrics)) | RAY_LABELS
        assert labels <= allowed, f"{where}: labels {sorted(labels - allowed)} in {expr}"
        seen |= metrics
    # Every metric is on a dashboard or in an alert (a histogram through any of its series).
    def base(name: str) -> str:
        return re.sub(r"_(bucket|count|sum)$", "", name)

    unread = {base(n) for n in names} - {base(n) for n in seen}
    assert not unread, f"metrics on no dashboard: {sorted(unread)}"


def test_the_parser_catches_a_renamed_metric_and_label():
    names = exported()
    metrics, labels = metrics_and_labels(
        'sum(rate(ray_raygang_preempted_total{queue=~"$Queue"}[5m])) by (reason, victim)')
    assert metrics - names.keys() == {"ray_raygang_preempted_total"}
    assert labels == {"queue", "reason", "victim"}


def test_dashboards_follow_rays_layout_and_each_panel_has_a_description():
    for board in dashboards.BOARDS:
        model = json.loads((MONITORING / "dashboards" / f"raygang-{board.name}.json")
                           .read_text())
        assert model["uid"] == board.uid
        variables = [v["name"] for v in model["templating"]["list"]]
        assert variables[:2] == ["datasource", "SessionName"]
        for panel in model["panels"]:
            if panel["type"] == "row":
                assert panel["gridPos"]["w"] == 24
                continue
            assert panel["datasource"] == "${datasource}" and panel["description"]
            assert panel["gridPos"]["w"] == 12 and panel["gridPos"]["x"] in (0, 12)
            for target in panel["targets"]:
                assert 'SessionName=~"$SessionName"' in target["expr"], target["expr"]


def test_the_kustomization_ships_every_dashboard_and_the_rules_twice_the_same():
    kustomization = yaml.safe_load((MONITORING / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    assert sorted(generator["files"]) == sorted(
        f"dashboards/raygang-{b.name}.json" for b in dashboards.BOARDS)
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    plain = yaml.safe_load((MONITORING / "raygang.rules.yaml").read_text())
    assert rule["kind"] == "PrometheusRule" and rule["spec"] == plain
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return  # kubectl's kustomize is the check below; the files are checked above
    out = subprocess.run([kubectl, "kustomize", str(MONITORING)], capture_output=True,
                         text=True, check=True).stdout
    built = {d["kind"]: d for d in yaml.safe_load_all(out)}
    assert set(built["ConfigMap"]["data"]) == {f"raygang-{b.name}.json"
                                               for b in dashboards.BOARDS}
    assert built["PrometheusRule"]["spec"] == plain


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (Debian: apt-get install prometheus; "
                           ".ci/run installs it)")
def test_promtool_accepts_the_rules_file_and_the_prometheusrule_spec(tmp_path: Path):
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    spec = tmp_path / "spec.rules.yaml"
    spec.write_text(yaml.safe_dump(rule["spec"]))
    for path in (MONITORING / "raygang.rules.yaml", spec):
        check = subprocess.run(["promtool", "check", "rules", str(path)],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
        assert f"SUCCESS: {len(alerts.ALERTS)} rules found" in check.stdout
