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


def _annotations(alert: alerts.Alert, value: str, queue: str | None = None) -> dict[str, str]:
    """The alert's annotations as Prometheus renders them, for the templates they use."""
    def render(text: str) -> str:
        for template in ("{{ $value | humanizeDuration }}", "{{ $value | humanize }}"):
            text = text.replace(template, value)
        return text.replace("{{ $labels.queue }}", queue or "")

    return {"summary": render(alert.summary), "description": render(alert.description)}


def _series(name: str, values: str, **labels: str) -> dict[str, str]:
    matchers = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{matchers}}}", "values": values}


@pytest.mark.skipif(shutil.which("promtool") is None,
                    reason="promtool is not installed (Debian: apt-get install prometheus; "
                           ".ci/run installs it)")
def test_each_alert_fires_on_its_condition_and_not_on_a_healthy_scheduler(tmp_path: Path):
    """`promtool test rules`: synthetic series, minute by minute, against the rules file."""
    by_name = {a.name: a for a in alerts.ALERTS}
    cycle = "ray_raygang_admission_cycle_duration_seconds_bucket"
    preempted = "ray_raygang_preempted_gangs_total"
    victim = {"queue": "a", "action": "preempt", "reason": "in_queue", "preemptor_kind": "gang"}
    # Troubled, for 30 min: a gang pending 2,000 s; every cycle between 2.5 and 5 s (p99
    # 4.975 s); 5 preemptions a minute (50 in 10 min); the GCS probe failing; and no
    # ray_raygang_running_gangs at all (no scheduler).
    troubled = [
        _series("ray_raygang_longest_pending_seconds", "2000x30", queue="a"),
        _series(cycle, "0x30", result="success", le="2.5"),
        _series(cycle, "0+10x30", result="success", le="5.0"),
        _series(cycle, "0+10x30", result="success", le="+Inf"),
        _series(preempted, "0+5x30", **victim),
        _series("ray_raygang_gcs_reachable", "0x30"),
    ]
    fired = {
        "RaygangGangPendingTooLong": ({"queue": "a"}, "33m 20s"),
        "RaygangAdmissionCycleSlow": ({}, "4.975"),
        "RaygangPreemptionStorm": ({}, "50"),
        "RaygangSchedulerDown": ({}, ""),
        "RaygangGcsUnreachable": ({}, ""),
    }
    assert set(fired) == set(by_name)
    healthy = [
        _series("ray_raygang_longest_pending_seconds", "60x30", queue="a"),
        _series(cycle, "0+10x30", result="success", le="0.01"),
        _series(cycle, "0+10x30", result="success", le="+Inf"),
        _series(preempted, "0+1x30", **victim),
        _series("ray_raygang_gcs_reachable", "1x30"),
        _series("ray_raygang_running_gangs", "3x30", queue="a"),
    ]
    spec = {
        "rule_files": [str(MONITORING / "raygang.rules.yaml")],
        "evaluation_interval": "1m",
        "tests": [
            {"interval": "1m", "input_series": troubled, "alert_rule_test": [
                {"eval_time": "20m", "alertname": name, "exp_alerts": [{
                    "exp_labels": {"severity": by_name[name].severity, **labels},
                    "exp_annotations": _annotations(by_name[name], value, labels.get("queue")),
                }]} for name, (labels, value) in fired.items()]},
            {"interval": "1m", "input_series": healthy, "alert_rule_test": [
                {"eval_time": "20m", "alertname": name, "exp_alerts": []} for name in fired]},
        ],
    }
    path = tmp_path / "alerts_test.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    check = subprocess.run(["promtool", "test", "rules", str(path)], capture_output=True,
                           text=True)
    assert check.returncode == 0, check.stdout + check.stderr
