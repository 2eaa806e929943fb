"""What an operator runs raygang with besides raygang: Grafana dashboards and Prometheus
alert rules over the scheduler's metrics (`runtime/scheduler/metrics.py`).

Both are data written here once and generated into `manifests/monitoring/` (the dashboards'
JSON, a plain rules file, a `PrometheusRule` and the kustomization that ships them):

    python -m raygang.ops            # rewrite the files
    python -m raygang.ops --check    # fail if a file differs from what would be written

tests/unit/test_ops.py checks that the files are current, that every query names only
metrics raygang exports, and (with `promtool`) that the rules load; tests/e2e/
test_prometheus.py evaluates every query on a real Prometheus scraping a real cluster.
"""
