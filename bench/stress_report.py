"""The stress set's reports (`bench/stress.py --table` and `--regret`), read from the
replays' `<out>/<slice>/<policy>.json`: the table of what was run, and the sweep that
chooses the scheduler's default policy (each candidate's mean-JCT regret per slice, its
worst case, the goals it misses, the noise margin and the choice), and where on a slice a
gap comes from (`waits`).

The caller names the slices (`bench/stress.py` builds them) and groups each with its
jittered copies (`Copies`; `--seeds K`). A policy's regret is measured on each copy
against the best policy on that copy; the slice's figure is the mean over the copies where
the policy was replayed. Without copies (K = 1) a slice is its own single copy and every
figure is the slice's, as before `--seeds`.

Data: the Philly trace (Microsoft, CC BY 4.0) and the Helios VC sizes (SenseTime, SC'21),
attributed in the table and the figure.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Iterable
from pathlib import Path

from raygang.sim.philly import ATTRIBUTION

HELIOS_ATTRIBUTION = ("Helios VC sizes: SenseTime HeliosData / HeliosArtifact, Hu et al., "
                      "SC'21, CC BY 4.0 / MIT")
BASELINES = ("kueue", "kai")
GOALS = ("JCT", "p99", "lost", "tenant", "32-GPU")  # issue 30's, in the order a cell names them
# A slice's name -> its copies' names, the slice's own first (`bench/stress.py` `copies`).
Copies = dict[str, list[str]]


# The table ------------------------------------------------------------------------------
def summaries(out: Path, name: str) -> dict[str, dict]:
    found = {}
    for path in sorted((out / name).glob("*.json")):
        data = json.loads(path.read_text())
        found[path.stem] = {**data["policies"][0], "jobs": data["jobs"],
                            # written since 2026-12-04 (`--why`): absent in older reports
                            "stops": data.get("stops", {}), "large": data.get("large", {})}
    return found


def tenant_vs_static(policy: dict, static: dict | None) -> dict[str, float]:
    """Each tenant's mean JCT over its mean JCT alone in its partition, on the jobs done
    under both (as `raygang sim` compares them, `sim.api`)."""
    if static is None:
        return {}
    pairs: dict[str, list[tuple[float, float]]] = {}
    for name, (queue, jct) in policy["jobs"].items():
        alone = static["jobs"].get(name, [queue, None])[1]
        if jct is not None and alone is not None:
            pairs.setdefault(queue, []).append((jct, alone))
    return {q: sum(a for a, _ in v) / max(sum(b for _, b in v), 1e-9)
            for q, v in pairs.items()}


def worst_vs_static(policy: dict, static: dict | None) -> float | None:
    return max(tenant_vs_static(policy, static).values(), default=None)


def table(out: Path, names: Iterable[str], policies: list[str]) -> str:
    """A row per slice (or copy) of `names` and policy replayed on it."""
    head = (f"{'slice':<22}{'policy':<16}{'JCT mean':>9}{'p99':>7}{'worst/st':>9}"
            f"{'preempt':>8}{'GPU-h lost':>11}{'32-GPU wait':>12}")
    lines = [head, "-" * len(head)]
    for name in names:
        found = summaries(out, name)
        for policy in policies:
            p = found.get(policy)
            if p is None:
                continue
            worst = worst_vs_static(p, found.get("static"))
            wait = p["large_gangs"]["queueing_max_h"]
            lines.append(
                f"{name:<22}{policy:<16}{p['jct_h']['mean']:>9.2f}{p['jct_h']['p99']:>7.1f}"
                f"{'-' if worst is None else f'{worst:.2f}':>9}"
                f"{p['preemptions']['count']:>8}{p['preemptions']['gpu_hours_lost']:>11.1f}"
                f"{'-' if wait is None else f'{wait:.1f}':>12}")
    lines.append(f"data: {ATTRIBUTION}")
    lines.append(f"quota shapes: {HELIOS_ATTRIBUTION}")
    return "\n".join(lines)


# The sweep that chooses ----------------------------------------------------------------
def _metric(p: dict, key: str) -> float:
    return {"jct": p["jct_h"]["mean"], "p99": p["jct_h"]["p99"],
            "lost": p["preemptions"]["gpu_hours_lost"]}[key]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)  # as the sweep always took it: K = 1 prints as before


def regrets(out: Path, candidates: list[str], names: Iterable[str],
            key: str = "jct") -> dict[str, dict[str, float]]:
    """Per candidate, per slice (or copy) of `names`: its `key` over the best of every
    candidate and baseline replayed on it, less 1 (0: it was the best)."""
    found: dict[str, dict[str, float]] = {c: {} for c in candidates}
    for name in names:
        ran = summaries(out, name)
        best = min((_metric(ran[p], key) for p in (*candidates, *BASELINES) if p in ran),
                   default=None)
        for c in candidates:
            if c in ran and best is not None:
                found[c][name] = _metric(ran[c], key) / max(best, 1e-9) - 1.0
    return found


def every(copies: Copies) -> list[str]:
    """Every slice's copies' names, slice by slice."""
    return [name for names in copies.values() for name in names]


def by_slice(found: dict[str, float], copies: Copies) -> dict[str, list[float]]:
    """Per slice, the figures of those of its copies that have one (a slice with none:
    left out)."""
    grouped = {s: [found[n] for n in names if n in found] for s, names in copies.items()}
    return {s: values for s, values in grouped.items() if values}


def _spread(by_copy: dict[str, dict[str, float]],
            copies: Copies) -> dict[str, dict[str, list[float]]]:
    return {c: by_slice(found, copies) for c, found in by_copy.items()}


def _means(spread: dict[str, dict[str, list[float]]]) -> dict[str, dict[str, float]]:
    return {c: {s: _mean(v) for s, v in found.items()} for c, found in spread.items()}


def _cell(values: list[float]) -> str:
    """A slice's regret in %: the mean over its copies, and their min-max when several."""
    mean = f"{100 * _mean(values):.1f}"
    if len(values) == 1:
        return mean
    return f"{mean} ({100 * min(values):.1f}–{100 * max(values):.1f})"


def noise(out: Path, probes: Iterable[str], policies: list[str]) -> dict[str, float]:
    """Per probe and policy: how far its mean JCT moved from the slice's, a share."""
    moved = {}
    for probe in probes:
        base, again = summaries(out, probe.rsplit("-j", 1)[0]), summaries(out, probe)
        for policy in policies:
            if policy in base and policy in again:
                moved[f"{probe} {policy}"] = (_metric(again[policy], "jct")
                                              / _metric(base[policy], "jct") - 1.0)
    return moved


def sweep(out: Path, candidates: list[str], copies: Copies, probes: Iterable[str] = ()) -> str:
    """The table that chose the default: each candidate's mean-JCT regret per slice (with
    copies: the mean over them, and their min-max), its worst case and mean over slices,
    and the other goals' worst cases; then the noise and the choice. The noise margin is
    the probes' (`paired_noise`) with one copy per slice, `seed_noise` with several."""
    by_copy = regrets(out, candidates, every(copies))
    spread = _spread(by_copy, copies)
    jct = _means(spread)
    candidates = [c for c in candidates if jct[c]]  # replayed on some slice
    names = [s for s in copies if any(s in jct[c] for c in candidates)]
    seeded = any(len(copies[s]) > 1 for s in names)
    lines = _regret_table(spread, candidates, names, seeded)
    lines += _worst_table(out, jct, candidates, {s: copies[s] for s in names})
    if seeded:
        margin, said = _seed_margins(by_copy, copies, candidates)
    else:
        margin, said = _probe_margin(out, probes, candidates)
    # The first candidate is the default to beat.
    return "\n".join(lines + said + ["", choose(jct, margin, candidates[0])])


def _regret_table(spread: dict[str, dict[str, list[float]]], candidates: list[str],
                  names: list[str], seeded: bool) -> list[str]:
    over = ("each copy of the slice; a slice's mean over its copies (min–max)" if seeded
            else "the slice")
    lines = [f"mean JCT regret (% over the best policy on {over}):", "",
             "| candidate | " + " | ".join(names) + " | worst | mean |",
             "|---" * (len(names) + 3) + "|"]
    for c in candidates:
        cells = [_cell(spread[c][n]) if n in spread[c] else "-" for n in names]
        means = [_mean(v) for v in spread[c].values()]
        lines.append(f"| {c} | " + " | ".join(cells) + f" | **{100 * max(means):.1f}** | "
                     f"{100 * _mean(means):.1f} |")
    return lines


def _vs_peers(ran: dict[str, dict], candidate: str) -> tuple[float | None, float | None]:
    """On one slice or copy: the candidate's GPU-hours lost over the best peer's, and its
    worst tenant over static (None: not measured there)."""
    if candidate not in ran:
        return None, None
    peers = [_metric(ran[b], "lost") for b in BASELINES if b in ran]
    lost = _metric(ran[candidate], "lost") / max(min(peers), 1e-9) if peers else None
    return lost, worst_vs_static(ran[candidate], ran.get("static"))


def _worst_table(out: Path, jct: dict[str, dict[str, float]], candidates: list[str],
                 copies: Copies) -> list[str]:
    """Per candidate, the worst over slices of each goal's figure (a slice's: the mean over
    its copies)."""
    p99 = _means(_spread(regrets(out, candidates, every(copies), "p99"), copies))
    ran = {name: summaries(out, name) for name in every(copies)}
    lines = ["", ("| candidate | worst JCT regret | worst p99 regret | GPU-h lost / best "
                  "peer's, worst | worst tenant / static, worst |"), "|---|---|---|---|---|"]
    for c in candidates:
        measured = {name: _vs_peers(found, c) for name, found in ran.items()}
        lost = _worst_mean({n: m[0] for n, m in measured.items()}, copies)
        tenant = _worst_mean({n: m[1] for n, m in measured.items()}, copies)
        w = max(jct[c], key=jct[c].__getitem__)
        lines.append(f"| {c} | {100 * jct[c][w]:.1f} % ({w}) | "
                     f"{100 * max(p99[c].values()):.1f} % | "
                     f"{'-' if lost is None else f'{lost:.2f}'} | "
                     f"{'-' if tenant is None else f'{tenant:.2f}'} |")
    return lines


def _worst_mean(found: dict[str, float | None], copies: Copies) -> float | None:
    """The worst over slices of a figure's mean over each slice's copies measured."""
    measured = {name: figure for name, figure in found.items() if figure is not None}
    return max((_mean(v) for v in by_slice(measured, copies).values()), default=None)


def _probe_margin(out: Path, probes: Iterable[str],
                  candidates: list[str]) -> tuple[float, list[str]]:
    """How far a probe moved the difference between two candidates, the most (one copy per
    slice), and the lines that say so."""
    moved = noise(out, probes, candidates)
    paired = paired_noise(moved)
    margin = max((abs(v) for v in paired.values()), default=0.0)
    return margin, ["", "noise: mean JCT on a probe (submissions moved by up to 60 s) against "
                    "the slice: " + ", ".join(f"{k} {100 * v:+.1f} %" for k, v in moved.items()),
                    "the difference between two policies moved by: "
                    + ", ".join(f"{k} {100 * v:+.1f} points" for k, v in paired.items())]


def seed_noise(by_copy: dict[str, dict[str, float]], copies: Copies, candidate: str,
               default: str) -> dict[str, float]:
    """Per slice with two copies or more where both were replayed: the standard error of the
    candidate's regret less the default's across those copies (the sample standard
    deviation of the paired differences over the square root of their number)."""
    errors = {}
    for s, names in copies.items():
        both = [n for n in names if n in by_copy[candidate] and n in by_copy[default]]
        if len(both) > 1:
            differences = [by_copy[candidate][n] - by_copy[default][n] for n in both]
            errors[s] = statistics.stdev(differences) / math.sqrt(len(both))
    return errors


def _seed_margins(by_copy: dict[str, dict[str, float]], copies: Copies,
                  candidates: list[str]) -> tuple[dict[str, float], list[str]]:
    """Per candidate but the default (the first): the largest over slices of `seed_noise`
    (0 where no slice has two copies with both), and the line that says so."""
    default, margins, said = candidates[0], {}, []
    for c in candidates[1:]:
        errors = seed_noise(by_copy, copies, c, default)
        margins[c] = max(errors.values(), default=0.0)
        if errors:
            s = max(errors, key=errors.__getitem__)
            said.append(f"{c} {100 * margins[c]:.1f} points ({s})")
    return margins, ["", f"noise: the standard error, across a slice's copies (submissions "
                     f"moved by up to 60 s), of a candidate's regret less {default}'s, on "
                     "the slice where it is largest: " + (", ".join(said) or "none measured")]


def missed_goals(ran: dict[str, dict], candidate: str) -> list[str] | None:
    """The goals (`GOALS`) the candidate misses on one slice or copy whose replays are `ran`
    (None: it, or every baseline, was not replayed there)."""
    peers = [ran[b] for b in BASELINES if b in ran]
    if candidate not in ran or not peers:
        return None
    p, fifo, missed = ran[candidate], ran.get("fifo"), []
    if _at(p, "jct") > min(_at(b, "jct") for b in peers):
        missed.append("JCT")
    if _at(p, "p99") > 1.01 * min(_at(b, "p99") for b in peers + ([fifo] if fifo else [])):
        missed.append("p99")
    if _at(p, "lost") > 0.5 * min(_at(b, "lost") for b in peers):
        missed.append("lost")
    worst = worst_vs_static(p, ran.get("static"))
    if worst is not None and worst > 1.05:
        missed.append("tenant")
    wait = p["large_gangs"]["queueing_max_h"]
    limit = fifo["large_gangs"]["queueing_max_h"] if fifo else None
    if wait is not None and limit is not None and round(wait, 1) > round(limit, 1):
        missed.append("32-GPU")
    return missed


def _at(p: dict, key: str) -> float:
    """At the table's precision: some baselines' figures are the table's."""
    return round(_metric(p, key), 2 if key == "jct" else 1)


def _goal_cell(found: list[list[str]]) -> str:
    """The goals missed on a majority of a slice's copies (`found`: those missed on each
    copy measured), with on how many when there are several; '-': none; '': unmeasured."""
    if not found:
        return ""
    counted = []
    for goal in GOALS:
        k = sum(goal in missed for missed in found)
        if k > len(found) / 2:
            counted.append(goal if len(found) == 1 else f"{goal} {k}/{len(found)}")
    return ", ".join(counted) or "-"


def goals(out: Path, candidates: list[str], copies: Copies) -> str:
    """Issue 30's "Done means", per candidate and slice: mean JCT <= the best of Kueue-style
    and KAI-style; p99 within 1 % of the best of them and of FIFO (where replayed);
    GPU-hours lost <= half the best peer's; worst tenant <= 1.05 of static; 32-GPU gangs'
    longest wait <= FIFO's (where replayed and there are any). Compared at the table's
    precision (hours to 0.01, p99, GPU-hours and waits to 0.1), as some baselines' figures
    are the table's. A cell lists the goals missed ('-': every goal measured is met). With
    copies, a goal counts as missed on a slice when it is missed on a majority of the copies
    where the candidate was measured, and the cell says on how many: `JCT 3/3, lost 2/3`."""
    ran = {name: summaries(out, name) for name in every(copies)}
    lines = ["| candidate | " + " | ".join(copies) + " |", "|---" * (len(copies) + 1) + "|"]
    for c in candidates:
        cells = [_goal_cell([m for n in names if (m := missed_goals(ran[n], c)) is not None])
                 for names in copies.values()]
        lines.append(f"| {c} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_noise(moved: dict[str, float]) -> dict[str, float]:
    """Per probe and pair of policies replayed on it: how far the difference between the
    two moved (the noise that matters when two policies are compared on one slice)."""
    by_probe: dict[str, dict[str, float]] = {}
    for key, value in moved.items():
        probe, policy = key.split(" ")
        by_probe.setdefault(probe, {})[policy] = value
    paired = {}
    for probe, found in by_probe.items():
        names = sorted(found)
        for i, first in enumerate(names):
            for second in names[i + 1:]:
                paired[f"{probe} {second} - {first}"] = found[second] - found[first]
    return paired


def choose(jct: dict[str, dict[str, float]], margin: float | dict[str, float],
           default: str = "raygang-no-tbf") -> str:
    """The candidate of least worst-case mean-JCT regret (a slice's: the mean over its
    copies), among those replayed on every slice any candidate was; the default stays
    unless one beats it by more than the margin: one for all (one copy per slice: how far
    moving submissions by a minute moves the difference between two policies, the probes')
    or one per candidate (copies: `seed_noise`'s largest, against the default)."""
    every_slice = set().union(*(v.keys() for v in jct.values()))
    worst = {c: max(v.values()) for c, v in jct.items() if v and set(v) == every_slice}
    best = min(worst, key=lambda c: (worst[c], c != default, c))
    noise = margin.get(best, 0.0) if isinstance(margin, dict) else margin
    if best != default and worst[default] - worst[best] <= noise:
        return (f"choice: {default} (worst case {100 * worst[default]:.1f} %); {best}'s "
                f"{100 * worst[best]:.1f} % is within the noise ({100 * noise:.1f} %)")
    return f"choice: {best} (worst case {100 * worst[best]:.1f} %)"


def plot(out: Path, path: Path, policies: list[str], copies: Copies) -> None:
    """Each policy's mean JCT over the best on each slice (with copies: the mean over them),
    as bars (those replayed on every slice, on the slices that all of them were)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jct = _means(_spread(regrets(out, policies, every(copies)), copies))
    most = max(len(v) for v in jct.values())
    policies = [p for p in policies if len(jct[p]) == most]
    names = [n for n in copies if all(n in jct[p] for p in policies)]
    fig, ax = plt.subplots(figsize=(10, 3.8))
    width = 0.8 / len(policies)
    for i, p in enumerate(policies):
        ax.bar([k + i * width for k in range(len(names))], [100 * jct[p][n] for n in names],
               width, label=p)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(names))], names, rotation=30,
                  ha="right", fontsize=8)
    ax.set_ylabel("mean JCT over the best (%)")
    ax.set_title("Stress set: mean JCT regret per slice (lower is better)", fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.text(0.01, 0.01, "Philly trace: Microsoft, CC BY 4.0 (Jeon et al., ATC'19); quota "
             "shapes: Helios VC sizes (Hu et al., SC'21)", fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


# Where a gap comes from -----------------------------------------------------------------
def waits(out: Path, name: str, tenant: str, policies: list[str], window_h: float) -> str:
    """The mean wait of `tenant`'s jobs ("all": every tenant's) on the slice `name`, by
    the window of their submission, under each policy; and the job-hours each policy's
    waits add over the first's. A job's wait is its completion time (its report's
    `jobs`) less its duration (the slice's `trace.csv`): its queueing and the work it
    redid after a stop. Only jobs completed under every policy are counted."""
    with open(out / name / "trace.csv", newline="") as f:
        trace = {row["name"]: row for row in csv.DictReader(f)}
    jobs = {p: json.loads((out / name / f"{p}.json").read_text())["jobs"] for p in policies}
    rows: dict[int, list[float]] = {}  # window -> [jobs, the policies' summed waits (s)]
    for job, (queue, _) in jobs[policies[0]].items():
        done = [jobs[p].get(job, [None, None])[1] for p in policies]
        if tenant not in ("all", queue) or None in done:
            continue
        row = trace[job]
        cells = rows.setdefault(int(float(row["submit_s"]) // (window_h * 3600)),
                                [0.0] * (1 + len(policies)))
        cells[0] += 1
        for i, jct in enumerate(done, 1):
            cells[i] += jct - float(row["duration_s"])
    who = "every tenant's" if tenant == "all" else f"tenant {tenant}'s"
    lines = [f"{who} jobs on {name}: mean wait (h) by submission window of {window_h:g} h",
             f"{'window':>12} {'jobs':>6} " + " ".join(f"{p:>10}" for p in policies)]
    for window in sorted(rows):
        cells = rows[window]
        span = f"{window * window_h:g}-{(window + 1) * window_h:g} h"
        lines.append(f"{span:>12} {cells[0]:6.0f} "
                     + " ".join(f"{s / cells[0] / 3600:10.2f}" for s in cells[1:]))
    total = [sum(cells[i] for cells in rows.values()) / 3600
             for i in range(1, 1 + len(policies))]
    lines.append(f"job-hours over {policies[0]}: "
                 + ", ".join(f"{p} {t - total[0]:+,.0f}" for p, t in zip(policies, total)))
    return "\n".join(lines)
