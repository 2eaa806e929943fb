"""bench/api_load.py runs end to end and prints REST and direct figures and the ratios
(small sizes), on the session's cluster (--address: its scheduler has the bench's queue
`load`), and the leak check after."""

from __future__ import annotations

import re

from tests.scripts import run_script

NUMBER = r"([\d.]+)"


def test_api_load_benchmark_small(ray_cluster):
    out = run_script("bench/api_load.py", "--n", "60", "--concurrency", "10",
                     "--address", ray_cluster.address, timeout=270)
    assert out.startswith("api_load: 60 requests per operation and side, 10 concurrent"), out
    rows = re.findall(r"^ +(submit|status)" + rf" +{NUMBER}" * 6 + rf" +{NUMBER}x$", out,
                      re.MULTILINE)
    assert [r[0] for r in rows] == ["submit", "status"], out
    for op, *figures, ratio in rows:
        rest_rate, rest_p50, rest_p99, direct_rate, direct_p50, direct_p99 = map(float, figures)
        assert rest_rate > 0 and direct_rate > 0, out
        assert 0 < rest_p50 <= rest_p99 and 0 < direct_p50 <= direct_p99, out
        assert abs(float(ratio) - rest_rate / direct_rate) < 0.01 + 0.01 * float(ratio), out
    floor = re.search(rf"^HTTP floor \(GET /healthz, no scheduler call\): {NUMBER} req/s, "
                      rf"p50 {NUMBER} ms, p99 {NUMBER} ms$", out, re.MULTILINE)
    assert floor and float(floor.group(1)) > 0, out
