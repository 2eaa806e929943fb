"""bench/core_scale.py runs, checks its plans and prints its figures (small sizes: --quick)."""

from __future__ import annotations

import re

from tests.scripts import run_script


def test_core_scale_benchmark_quick():
    text = run_script("bench/core_scale.py", "--quick", timeout=120)
    assert re.search(r"^core_scale: 200 nodes x 8 GPU 64 CPU .*20 leaf queues .*\d+ over quota"
                     r".*800 running and 400 pending gangs", text, re.MULTILINE), text
    rows = {}
    for actions in ("allocate", "allocate\\+reclaim", "allocate\\+reclaim\\+preempt"):
        line = re.search(
            rf"^{actions} +[\d.]+ ms +[\d,]+/s  admitted (\d+) = [\d,]+/s \(allocate \d+, reclaim (\d+), "
            rf"preempt (\d+)\); victims reclaim (\d+), preempt (\d+); waiting NO_FIT \d+, "
            rf"BEHIND \d+, LIMIT \d+, UNSCHEDULABLE \d+$", text, re.MULTILINE)
        assert line, text
        rows[actions] = [int(n) for n in line.groups()]
    allocate, _, full = rows.values()
    assert allocate[0] > 0 and allocate[1:] == [0, 0, 0, 0]
    # The workload makes every action work: reclaim and preempt both admit, with victims.
    assert all(n > 0 for n in full), text
    assert re.search(r"^time per action \(differences of the rows\): allocate \d+ ms, "
                     r"reclaim \+-?\d+ ms, preempt \+-?\d+ ms$", text, re.MULTILINE), text
    assert re.search(r"^policy cost ratio, full / allocate only: [\d.]+x$", text, re.MULTILINE)
    assert re.search(r"^target full cycle < 2 s: (met|NOT met) \([\d.]+ s\); target >= 5,000 "
                     r"decisions/s: (met|NOT met) \([\d,]+\)", text, re.MULTILINE), text
    assert re.search(r"^checks: every plan sound", text, re.MULTILINE), text
    # The plain victim search reaches the very same plan (exit status 1 otherwise).
    plain = re.search(r"^plain victim search .*: [\d,]+ ms vs raygang [\d,]+ ms on the same "
                      r"cycle: ratio [\d.]+x, \d+ victims, same plan: (\w+)$", text, re.MULTILINE)
    assert plain and plain.group(1) == "yes", text
