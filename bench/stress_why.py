"""Why a candidate misses issue 30's goals on a slice (`bench/stress.py --why CANDIDATE`):
for each goal it misses on most of a slice's copies (`stress_report.missed_goals`), the
figures of every copy where it misses it that say where the miss comes from, read from the
replays' reports (`<out>/<slice>/<policy>.json`: `jobs`, `stops`, `large`):

- JCT: the job-hours of JCT the candidate adds over the better of Kueue-style and
  KAI-style on that copy, the tenants that add most of them, and what all but the first add;
- p99: the tenants of the jobs around the p99 (the 0.5-1.5 % longest), under the
  candidate and under the policy with the best p99;
- lost: the GPU-hours lost by the action that stopped the job (`preempt`: a higher
  priority, here the inference stream; `reclaim`: a queue below its quota), against half
  the best peer's;
- tenant: the tenant furthest behind its static partition;
- 32-GPU: the large gang that waited longest: its first wait, and each stop that sent it
  back to wait again (by which action, after how long running, losing how much work).

It reads the figures and sorts them; it does not judge a cause. The note or page that
quotes it says why.
"""

from __future__ import annotations

from pathlib import Path

from bench.stress_report import (BASELINES, GOALS, Copies, _metric, missed_goals,
                                 summaries, tenant_vs_static)
from raygang.sim.metrics import HOUR


def why(out: Path, candidate: str, copies: Copies) -> str:
    """Per slice of `copies`, each goal the candidate misses on most of its copies, and
    per copy where it misses it, what the miss is made of."""
    lines = [f"Why {candidate} misses issue 30's goals (per slice: the goals missed on most "
             "of its copies; per copy: where the miss comes from)"]
    for slice_name, names in copies.items():
        ran = {n: summaries(out, n) for n in names}
        missed = {n: m for n in names if (m := missed_goals(ran[n], candidate)) is not None}
        if not missed:  # not replayed there
            continue
        majority = [g for g in GOALS
                    if sum(g in m for m in missed.values()) > len(missed) / 2]
        lines.append(f"\n{slice_name}: " + (", ".join(majority) or "every goal met"))
        for goal in majority:
            for name in (n for n in names if goal in missed.get(n, [])):
                lines.append(f"  {goal:<6} {name:<26} {EXPLAIN[goal](ran[name], candidate)}")
    return "\n".join(lines)


def _peers(ran: dict[str, dict], with_fifo: bool = False) -> list[str]:
    return [p for p in (*BASELINES, *(("fifo",) if with_fifo else ())) if p in ran]


def _best(ran: dict[str, dict], key: str, with_fifo: bool = False) -> str:
    return min(_peers(ran, with_fifo), key=lambda p: _metric(ran[p], key))


def _done(policy: dict) -> dict[str, tuple[str, float]]:
    return {job: (queue, jct) for job, (queue, jct) in policy["jobs"].items() if jct is not None}


def jct_gap(ran: dict[str, dict], candidate: str, top: int = 2) -> str:
    """The job-hours of JCT the candidate adds over the best peer, on the jobs both
    completed, and the `top` tenants that add most (each: its share of the gap, its jobs,
    its mean JCT under both)."""
    peer = _best(ran, "jct")
    mine, theirs = _done(ran[candidate]), _done(ran[peer])
    by_tenant: dict[str, list[float]] = {}  # tenant -> [jobs, my JCT s, their JCT s]
    for job, (queue, jct) in mine.items():
        if job in theirs:
            row = by_tenant.setdefault(queue, [0, 0.0, 0.0])
            row[0], row[1], row[2] = row[0] + 1, row[1] + jct, row[2] + theirs[job][1]
    if not by_tenant:
        return f"no job completed under both {candidate} and {peer}"
    gap = sum(r[1] - r[2] for r in by_tenant.values()) / HOUR
    worst = sorted(by_tenant.items(), key=lambda kv: kv[1][2] - kv[1][1])[:top]
    said = ", ".join(f"{t} {(r[1] - r[2]) / HOUR:+,.0f} ({r[0]} jobs, "
                     f"{r[1] / r[0] / HOUR:.2f} vs {r[2] / r[0] / HOUR:.2f} h)"
                     for t, r in worst)
    first, row = worst[0]
    return (f"{_metric(ran[candidate], 'jct'):.2f} h vs {peer} "
            f"{_metric(ran[peer], 'jct'):.2f} h: {gap:+,.0f} job-h; most from {said}; "
            f"every tenant but {first} {gap - (row[1] - row[2]) / HOUR:+,.0f}")


def _around_p99(policy: dict) -> dict[str, list[float]]:
    """Tenant -> [how many of the jobs around the p99 (the 0.5-1.5 % longest completed
    jobs: those that set it) are its, their mean JCT in hours], most first."""
    done = sorted(_done(policy).values(), key=lambda qj: -qj[1])
    band: dict[str, list[float]] = {}
    for queue, jct in done[int(0.005 * len(done)):max(1, round(0.015 * len(done)))]:
        row = band.setdefault(queue, [0, 0.0])
        row[0], row[1] = row[0] + 1, row[1] + jct / HOUR
    return {q: [k, total / k] for q, (k, total) in sorted(band.items(),
                                                           key=lambda kv: -kv[1][0])}


def p99_tail(ran: dict[str, dict], candidate: str, top: int = 2) -> str:
    """The tenants with most of the jobs around the candidate's p99 (how many, their mean
    JCT), and the same around the p99 of the policy with the best."""
    peer = _best(ran, "p99", with_fifo=True)
    mine, theirs = _around_p99(ran[candidate]), _around_p99(ran[peer])
    said = ", ".join(f"{t} {k:.0f} of {jct:.1f} h ({peer}: {theirs.get(t, [0])[0]:.0f}"
                     + (f" of {theirs[t][1]:.1f} h)" if t in theirs else ")")
                     for t, (k, jct) in list(mine.items())[:top])
    return (f"{_metric(ran[candidate], 'p99'):.1f} h vs {peer} "
            f"{_metric(ran[peer], 'p99'):.1f} h; the jobs around it, by tenant: {said}")


def lost_by_action(policy: dict) -> dict[str, float]:
    """GPU-hours lost, per action that stopped the job (from the report's `stops`)."""
    found: dict[str, float] = {}
    for stops in policy.get("stops", {}).values():
        for action, _ran, lost, gpus in stops:
            found[action] = found.get(action, 0.0) + lost * gpus / HOUR
    return dict(sorted(found.items()))


def lost_split(ran: dict[str, dict], candidate: str) -> str:
    peer = _best(ran, "lost")
    split = lost_by_action(ran[candidate])
    said = ", ".join(f"{a} {v:.1f}" for a, v in split.items()) or "no stops recorded"
    return (f"{_metric(ran[candidate], 'lost'):.1f} GPU-h ({said}) vs half of {peer}'s "
            f"{_metric(ran[peer], 'lost'):.1f} = {_metric(ran[peer], 'lost') / 2:.1f}")


def worst_tenant(ran: dict[str, dict], candidate: str) -> str:
    ratios = tenant_vs_static(ran[candidate], ran.get("static"))
    tenant = max(ratios, key=ratios.__getitem__)
    jobs = sum(1 for queue, _ in _done(ran[candidate]).values() if queue == tenant)
    return f"{tenant} ({jobs} jobs) at {ratios[tenant]:.2f} of its static partition"


def large_wait(ran: dict[str, dict], candidate: str) -> str:
    """The large gang (>= 32 GPUs) that waited longest: in all, before its first start,
    and each stop that sent it back (action, hours run, hours lost)."""
    large = ran[candidate].get("large", {})
    if not large:
        return "no per-gang waits in the report (replayed before `large` was written)"
    job = max(large, key=lambda j: large[j][0])
    queued, first = large[job]
    stops = ran[candidate].get("stops", {}).get(job, [])
    said = "; ".join(f"{a} after {r / HOUR:.1f} h run, {lost / HOUR:.2f} h lost"
                     for a, r, lost, _ in stops) or "never stopped"
    fifo = ran.get("fifo")
    limit = None if fifo is None else fifo["large_gangs"]["queueing_max_h"]
    return (f"{job}: {queued / HOUR:.1f} h queued in all (first start after "
            f"{first / HOUR:.1f} h; {said}) vs FIFO's longest "
            + ("-" if limit is None else f"{limit:.1f} h"))


EXPLAIN = {"JCT": jct_gap, "p99": p99_tail, "lost": lost_split, "tenant": worst_tenant,
           "32-GPU": large_wait}

