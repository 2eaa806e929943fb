"""The files the head-faults bench's members write (`head_faults.body`): a line per second
while a member runs (`<pid> <monotonic time>`), `<pid> checkpoint <t>` when a preemption's
hook ran, `<pid> done <t>` when its body ended; one file per gang and rank. What they show
once the bench has run: bodies that ran twice, and members that still write."""

from __future__ import annotations

import time
from collections import defaultdict
from pathlib import Path


def twice(log_dir: str) -> dict[str, str]:
    """Members whose bodies ran twice: two `done` lines, or two processes' lines
    interleaved (an attempt writing after the next one began)."""
    found: dict[str, str] = {}
    for path in Path(log_dir).iterdir():
        spans: dict[str, list[float]] = defaultdict(list)
        dones = 0
        for line in path.read_text().splitlines():
            pid, *rest = line.split()
            dones += rest[0] == "done"
            spans[pid].append(float(rest[-1]))
        if dones > 1:
            found[path.name] = f"{dones} bodies done"
        ordered = sorted((min(t), max(t), pid) for pid, t in spans.items())
        for (_, end, pid), (begin, _, later) in zip(ordered, ordered[1:]):
            if begin < end:
                found[path.name] = f"{pid} wrote until {end:.1f}, {later} began {begin:.1f}"
    return found


def writers(logs: str, within_s: float = 3.0) -> set[str]:
    """The member processes that wrote a line to their gang's file in the last
    `within_s` seconds (`<file> <pid>`)."""
    time.sleep(within_s)
    now, found = time.monotonic(), set()
    for path in Path(logs).iterdir():
        lines = path.read_text().split("\n")
        last = next((x.split() for x in reversed(lines) if x.strip()), None)
        if last and last[1] not in ("done", "checkpoint") and now - float(last[1]) < within_s:
            found.add(f"{path.name} {last[0]}")
    return found
