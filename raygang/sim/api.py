"""The Python API: replay a trace under several policies and compare them.

    comparison = simulate(trace, ["raygang", "fifo", "static"], SimSettings(nodes=80))
    print(comparison.table())
    comparison.write(Path("out"))       # report.json, report.txt, *.png
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from raygang.control.config import SchedulerConfig
from raygang.sim.engine import Replay, replay
from raygang.sim.metrics import summarize
from raygang.sim.policies import SimPolicy, policy
from raygang.sim.settings import SimSettings
from raygang.sim.trace import Trace

# (policy, simulated seconds, jobs done, jobs in all)
Progress = Callable[[str, float, int, int], None]


@dataclass
class Comparison:
    trace: Trace
    settings: SimSettings
    replays: list[Replay]
    summaries: list[dict]

    def to_json(self) -> dict:
        return {
            "trace": {"source": self.trace.source, "start": self.trace.start,
                      "jobs": len(self.trace.jobs), "notes": list(self.trace.notes),
                      "attribution": self.trace.attribution},
            "settings": self.settings.model_dump(),
            "quotas_gpus": self.replays[0].quotas if self.replays else {},
            "policies": self.summaries,
        }

    def table(self) -> str:
        from raygang.sim.report import text_table

        return text_table(self.trace, self.settings, self.summaries)

    def write(self, out: Path, plots: bool = True) -> list[Path]:
        """report.json, report.txt and (with matplotlib) the plots, into `out`."""
        out.mkdir(parents=True, exist_ok=True)
        written = [out / "report.json", out / "report.txt"]
        written[0].write_text(json.dumps(json_safe(self.to_json()), indent=2) + "\n")
        written[1].write_text(self.table() + "\n")
        if plots:
            from raygang.sim.plots import write_plots

            written += write_plots(self.trace, self.settings, self.replays, out)
        return written


def simulate(trace: Trace, policies: Sequence[str | SimPolicy] = ("raygang",),
             settings: SimSettings | None = None, config: SchedulerConfig | None = None,
             progress: Progress | None = None) -> Comparison:
    """Replay `trace` under each policy (names from `sim.policies.POLICIES`)."""
    settings = settings or SimSettings()
    config = config or SchedulerConfig()
    replays, summaries = [], []
    for chosen in policies:
        chosen = policy(chosen) if isinstance(chosen, str) else chosen
        tick = None
        if progress is not None:
            tick = (lambda name: lambda t, done, total: progress(name, t, done, total))(
                chosen.name)
        result = replay(trace, chosen, settings, config, tick)
        replays.append(result)
        summaries.append(summarize(result, settings.checkpoint_s))
    _relative_to_static(replays, summaries)
    return Comparison(trace, settings, replays, summaries)


def _relative_to_static(replays: list[Replay], summaries: list[dict]) -> None:
    """Each tenant's mean JCT over its mean JCT in the static partition, on the jobs that
    completed under both (a job too large for its tenant's partition is not compared)."""
    static = next((r for r in replays if r.policy == "static"), None)
    if static is None:
        return
    for result, summary in zip(replays, summaries):
        ratios = {}
        for queue in summary["tenants"]:
            pairs = [(log.jct_s, static.jobs[name].jct_s) for name, log in result.jobs.items()
                     if log.job.queue == queue and log.jct_s is not None and not log.skipped
                     and static.jobs[name].jct_s is not None and not static.jobs[name].skipped]
            if pairs:
                ratios[queue] = (sum(a for a, _ in pairs) / len(pairs)) / max(
                    sum(b for _, b in pairs) / len(pairs), 1e-9)
            summary["tenants"][queue]["jct_vs_static"] = ratios.get(queue, math.nan)
        summary["worst_tenant_jct_vs_static"] = max(ratios.values(), default=math.nan)


def json_safe(value: object) -> object:
    """JSON has no NaN: write null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_safe(v) for v in value]
    return value
