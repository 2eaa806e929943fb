"""bench/stress.py --why (bench/stress_why.py): where a candidate's missed goals come from,
read from small reports written here as `run_one` writes them (no replay)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.benches import load_bench

H = 3600.0
DEFAULT = "raygang-no-tbf"


@pytest.fixture(scope="module")
def stress():
    return load_bench("stress")


def _report(out: Path, name: str, policy: str, jobs: dict[str, tuple[str, float]],
            lost: float = 0.0, stops: dict | None = None, large: dict | None = None,
            large_max: float | None = None) -> None:
    """A replay's report: `jobs` name -> (tenant, JCT in hours); its mean and p99 are
    taken from them as the replay's summary would be (p99: the longest, here)."""
    where = out / name
    where.mkdir(parents=True, exist_ok=True)
    jcts = [jct for _, jct in jobs.values()]
    summary = {"jct_h": {"mean": sum(jcts) / len(jcts), "p99": max(jcts)},
               "preemptions": {"count": len(stops or {}), "gpu_hours_lost": lost},
               "large_gangs": {"queueing_max_h": large_max}}
    data = {"policies": [summary],
            "jobs": {job: [tenant, jct * H] for job, (tenant, jct) in jobs.items()},
            "stops": stops or {}, "large": large or {}}
    (where / f"{policy}.json").write_text(json.dumps(data))


def _jobs(**by_tenant: list[float]) -> dict[str, tuple[str, float]]:
    return {f"{tenant}-{i}": (tenant, jct) for tenant, jcts in by_tenant.items()
            for i, jct in enumerate(jcts)}


def test_every_goal_the_sweep_names_has_an_explanation(stress):
    assert set(stress.stress_why.EXPLAIN) == set(stress.stress_report.GOALS)


def test_why_names_the_tenants_the_actions_and_the_stops_behind_each_missed_goal(
        stress, tmp_path):
    first = list(stress.SLICES)[0]
    names = stress.copies(first, 3)
    # Tenant "short" makes the whole JCT gap over KAI-style (the better peer), "long" none;
    # the default loses 12 GPU-hours, 9 of them to inference (preempt), against half of
    # KAI-style's 10; its 32-GPU gang was reclaimed after 14 h and waited 12.4 h in all.
    peer_jobs = _jobs(short=[1.0, 1.0, 1.0], long=[10.0])
    mine = _jobs(short=[3.0, 3.0, 3.0], long=[10.0])
    stops = {"short-0": [["preempt", 0.5 * H, 0.25 * H, 8]],
             "short-1": [["preempt", 0.5 * H, 0.5 * H, 12]],
             "big": [["reclaim", 14.0 * H, 0.1 * H, 32], ["reclaim", 1.0 * H, 0.0, 32]]}
    for name in names:
        _report(tmp_path, name, "kai", peer_jobs, lost=10.0, large_max=8.0)
        _report(tmp_path, name, "kueue", _jobs(short=[2.0] * 3, long=[10.0]), lost=30.0)
        _report(tmp_path, name, "fifo", _jobs(short=[4.0] * 3, long=[9.0]), large_max=8.2)
        _report(tmp_path, name, DEFAULT, mine, lost=12.0, stops=stops,
                large={"big": [12.4 * H, 3.1 * H]}, large_max=12.4)
    text = stress.stress_why.why(tmp_path, DEFAULT, {first: names})
    assert f"{first}: JCT, p99, lost, 32-GPU" in text
    # JCT: 6 job-hours over KAI-style (the better peer), all tenant short's
    assert ("4.75 h vs kai 3.25 h: +6 job-h; most from short +6 (3 jobs, 3.00 vs 1.00 h), "
            "long +0 (1 jobs, 10.00 vs 10.00 h); every tenant but short +0") in text
    # p99: the longest job, tenant long's under both (FIFO has the best p99, 9 h)
    assert ("10.0 h vs fifo 9.0 h; the jobs around it, by tenant: long 1 of 10.0 h "
            "(fifo: 1 of 9.0 h)") in text
    # lost: preempt 2 + 6 = 8 GPU-h, reclaim 3.2 GPU-h, against half of KAI-style's 10
    assert "12.0 GPU-h (preempt 8.0, reclaim 3.2) vs half of kai's 10.0 = 5.0" in text
    assert ("big: 12.4 h queued in all (first start after 3.1 h; reclaim after 14.0 h run, "
            "0.10 h lost; reclaim after 1.0 h run, 0.00 h lost) vs FIFO's longest 8.2 h"
            ) in text
    assert text.count("  JCT    ") == 3  # every copy that misses it


def test_a_goal_missed_on_a_minority_of_copies_is_not_explained(stress, tmp_path):
    first = list(stress.SLICES)[0]
    names = stress.copies(first, 3)
    for name, jct in zip(names, (1.5, 0.5, 0.5)):  # the JCT goal missed on one copy of three
        _report(tmp_path, name, "kai", _jobs(a=[1.0, 1.0]))
        _report(tmp_path, name, DEFAULT, _jobs(a=[jct, 1.0]))
    text = stress.stress_why.why(tmp_path, DEFAULT, {first: names})
    assert f"{first}: every goal met" in text and "vs kai" not in text


def test_a_tenant_behind_its_static_partition_is_named(stress, tmp_path):
    first = list(stress.SLICES)[0]
    _report(tmp_path, first, "kai", _jobs(a=[1.0], b=[1.0]))
    _report(tmp_path, first, "static", _jobs(a=[1.0], b=[1.0]))
    _report(tmp_path, first, DEFAULT, _jobs(a=[1.0], b=[1.2]))
    text = stress.stress_why.why(tmp_path, DEFAULT, {first: [first]})
    assert f"{first}: JCT, p99, tenant" in text
    assert "b (1 jobs) at 1.20 of its static partition" in text


def test_the_cli_prints_why_for_the_held_out_slices_too(stress, tmp_path, capsys):
    held = list(stress.HELD_OUT)[0]
    _report(tmp_path, held, "kai", _jobs(a=[1.0]))
    _report(tmp_path, held, DEFAULT, _jobs(a=[2.0]))
    assert stress.main(["--out", str(tmp_path), "--why", DEFAULT]) == 0
    assert held not in capsys.readouterr().out  # the set alone
    assert stress.main(["--out", str(tmp_path), "--why", DEFAULT, "--held-out"]) == 0
    assert f"{held}: JCT, p99" in capsys.readouterr().out
