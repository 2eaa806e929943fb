"""bench/core_cycle.py runs and prints its figures (small sizes: --quick)."""

from __future__ import annotations

import re

from tests.scripts import run_script


def test_core_cycle_benchmark_quick():
    text = run_script("bench/core_cycle.py", "--quick", timeout=120)
    for mode in ("off", "ahead 4", "on "):
        line = re.search(rf"^backfill {mode}: cycle +[\d.]+ ms, +[\d,]+ decisions/s, "
                         rf"admitted (\d+), waiting: NO_FIT \d+, BEHIND \d+, UNSCHEDULABLE \d+$",
                         text, re.MULTILINE)
        assert line, text
        assert int(line.group(1)) > 0
    naive = re.search(r"naive reference .*: ([\d,]+) us/decision vs raygang ([\d,]+) us/decision "
                      r"on the same gangs: ratio ([\d.]+)x, same decisions: yes", text)
    assert naive, text
    assert "target >= 5,000 decisions/s:" in text
