"""The report's plots (matplotlib, an optional dependency: `pip install raygang[sim]`):
JCT CDF per policy, GPU allocation over time, pending jobs per queue over time. Each
carries the trace's attribution in its footer."""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from raygang.sim.engine import Replay
from raygang.sim.settings import SimSettings
from raygang.sim.trace import Trace

HOUR = 3600.0


@dataclass(frozen=True)
class Comparison:
    """What the plots show: replays of one trace under several policies."""

    trace: Trace
    settings: SimSettings
    replays: Sequence[Replay]


def write_plots(trace: Trace, settings: SimSettings, replays: Sequence[Replay],
                out: Path) -> list[Path]:
    """The PNG plots of these replays in `out` (none without matplotlib)."""
    comparison = Comparison(trace, settings, replays)
    try:
        import matplotlib
    except ImportError:
        return []  # the text and JSON report stand without them
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    for name, draw in (("jct_cdf.png", _jct_cdf), ("gpu_allocation.png", _allocation),
                       ("pending_per_queue.png", _pending)):
        figures = draw(plt, comparison)
        for suffix, figure in figures:
            path = out / name.replace(".png", f"{suffix}.png")
            _footer(figure, comparison)
            figure.savefig(path, dpi=110)
            plt.close(figure)
            written.append(path)
    return written


def _footer(figure, comparison: Comparison) -> None:
    text = comparison.trace.attribution
    if text:
        figure.text(0.01, 0.005, "\n".join(textwrap.wrap("Data: " + text, 150)), fontsize=5,
                    va="bottom", ha="left", color="0.35")
        figure.subplots_adjust(bottom=0.22)


def _jct_cdf(plt, comparison: Comparison) -> list:
    figure, axis = plt.subplots(figsize=(8, 5))
    for result in comparison.replays:
        jcts = sorted(log.jct_s / HOUR for log in result.jobs.values()
                      if log.jct_s is not None and not log.skipped)
        if jcts:
            axis.step(jcts, [(i + 1) / len(jcts) for i in range(len(jcts))], where="post",
                      label=result.policy)
    axis.set_xscale("log")
    axis.set_xlabel("job completion time (h, log scale)")
    axis.set_ylabel("fraction of jobs")
    axis.set_title(_title("JCT CDF", comparison))
    axis.grid(alpha=0.3)
    axis.legend()
    return [("", figure)]


def _allocation(plt, comparison: Comparison) -> list:
    figure, axis = plt.subplots(figsize=(9, 4.5))
    for result in comparison.replays:
        steps = result.usage.allocation
        axis.step([t / HOUR for t, _ in steps], [g / result.gpus for _, g in steps],
                  where="post", label=result.policy, linewidth=0.8)
    last = _last_submission(comparison)
    axis.axvline(last / HOUR, color="0.5", linestyle=":", linewidth=0.8)
    axis.set_xlim(0, 1.2 * last / HOUR)  # the long tail after it is a few long jobs
    axis.set_xlabel("hours since the trace's start (dotted: last submission)")
    axis.set_ylabel("GPUs allocated / cluster GPUs")
    axis.set_ylim(0, 1.05)
    axis.set_title(_title("GPU allocation", comparison))
    axis.legend()
    return [("", figure)]


def _pending(plt, comparison: Comparison) -> list:
    figures = []
    for result in comparison.replays:
        figure, axis = plt.subplots(figsize=(9, 4.5))
        series: dict[str, list[tuple[float, int]]] = {}
        for t, queue, count in result.usage.backlog:
            series.setdefault(queue, []).append((t / HOUR, count))
        biggest = sorted(series, key=lambda q: -max(c for _, c in series[q]))[:8]
        for queue in biggest:
            points = series[queue]
            axis.step([t for t, _ in points], [c for _, c in points], where="post",
                      label=queue, linewidth=0.8)
        axis.set_xlim(0, 1.2 * _last_submission(comparison) / HOUR)
        axis.set_xlabel("hours since the trace's start")
        axis.set_ylabel("pending jobs")
        axis.set_title(_title(f"pending jobs per queue ({result.policy})", comparison))
        axis.legend(fontsize=7, ncol=2)
        figures.append((f"_{result.policy}", figure))
    return figures


def _last_submission(comparison: Comparison) -> float:
    return max((log.submitted_at or 0.0 for log in comparison.replays[0].jobs.values()),
               default=0.0) or 1.0


def _title(what: str, comparison: Comparison) -> str:
    s = comparison.settings
    return f"{what} - {len(comparison.trace.jobs)} jobs, {s.nodes} nodes x {s.gpus_per_node} GPUs"
