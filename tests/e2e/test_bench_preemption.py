"""bench/preemption.py runs end to end and prints both sides, the ratio and the target
(--quick: 2 GPUs), on the session's cluster (--address: the bench holds the GPUs beyond 4
with a placement group; no cluster of its own to start), and the leak check after."""

from __future__ import annotations

import re

from tests.scripts import run_script


def test_preemption_benchmark_quick(ray_cluster):
    out = run_script("bench/preemption.py", "--quick", "--address", ray_cluster.address,
                     timeout=270)
    gpus = 2
    assert re.search(rf"^preemption: {gpus} GPUs full of {gpus} batch training gangs", out,
                     re.M), out
    rows = re.findall(r"^ +(\d) GPU +([\d.]+) +([\d.]+) +([\d.]+)x +([\d.]+)$", out,
                      re.MULTILINE)
    assert [int(r[0]) for r in rows] == [1], out  # and half the cluster: 1 GPU too
    for _, reserve, raw, _, answer in rows:
        assert 0 < float(raw) and 0 < float(reserve) <= float(answer)
    assert "target reserve < 1.4 s (KAI Scheduler publishes 13.9 s for one GPU):" in out
    # Shrink vs preempt: the elastic gang gives up its surplus and runs on at its minimum;
    # the rigid one is stopped whole and loses its work.
    elastic = re.search(rf"^ +elastic {gpus // 2}\.\.{gpus} +([\d.]+) +(\d)/1 +([\d.]+) +(\d+)$",
                        out, re.M)
    rigid = re.search(rf"^ +rigid {gpus} +([\d.]+) +(\d)/1 +([\d.]+) +(\d+)$", out, re.M)
    assert elastic and rigid, out
    assert (elastic[2], float(elastic[3]), elastic[4]) == ("0", 0.0, str(gpus // 2))
    assert rigid[2] == "1" and float(rigid[3]) > 0 and rigid[4] == "0"
