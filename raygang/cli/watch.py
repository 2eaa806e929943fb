"""`raygang submit --wait` (and `raygang job submit --wait`): follow a gang (a job) until
it finishes.

On a terminal a live spinner shows the state, reason and queue position, with a line
above it per state change; otherwise (a pipe, CI logs) only the state-change lines.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from rich.console import Console
from rich.text import Text

from raygang.cli import render
from raygang.cli.http import EXIT_API, EXIT_UNREACHABLE, ApiClient, CliError

POLL_S = 0.5
UNREACHABLE_POLLS = 20  # tolerate ~10 s of API restarts (Serve replica, uvicorn reload)
FINISHED = ("SUCCEEDED", "FAILED", "CANCELLED")
STOP_COMMAND = {"gang": "cancel", "job": "job stop"}  # how to stop one: `raygang <this> ID`


def describe(g: Mapping[str, Any]) -> str:
    """`queue position 2, preempted 1x: needs {GPU: 4} ...` (one line, without the state)."""
    parts = []
    if g.get("queue_position") is not None:
        parts.append(f"queue position {g['queue_position']}")
    if g.get("preemptions"):
        parts.append(f"preempted {g['preemptions']}x")
    text = ", ".join(parts)
    if g.get("reason"):
        text += f": {g['reason']}" if text else g["reason"]
    return text


def wait(client: ApiClient, gang_id: str, out: Console,
         sleep: Callable[[float], None] = time.sleep,
         clock: Callable[[], float] = time.monotonic, kind: str = "gang") -> Mapping[str, Any]:
    """Poll `/v1/{kind}s/{id}` until it finishes; returns its last status. Interrupting
    only stops watching: the gang goes on (cancel it with `raygang cancel`)."""
    started = clock()
    shown: str | None = None
    live = out.status(f"{kind} {gang_id}: submitted") if out.is_terminal else None
    try:
        if live is not None:
            live.start()
        while True:
            g = _poll(client, f"/v1/{kind}s/{gang_id}", sleep)
            line = f"{g['state']:<10} {describe(g)}".rstrip()
            if line != shown:
                shown = line
                stamp = f"{clock() - started:6.1f}s"
                out.print(Text.assemble((stamp, "dim"), "  ", render.state(g["state"]),
                                        line[len(g["state"]):]))
            if g["state"] in FINISHED:
                return g
            if live is not None:
                live.update(f"{kind} {gang_id}: {g['state']} {describe(g)}")
            sleep(POLL_S)
    except KeyboardInterrupt:
        raise CliError(f"stopped watching; {kind} {gang_id} goes on "
                       f"(raygang {STOP_COMMAND[kind]} {gang_id} to stop it)", EXIT_API) from None
    finally:
        if live is not None:
            live.stop()


def _poll(client: ApiClient, path: str, sleep: Callable[[float], None]) -> Mapping[str, Any]:
    for attempt in range(UNREACHABLE_POLLS):
        try:
            return client.get(path)
        except CliError as error:
            if error.exit_code != EXIT_UNREACHABLE or attempt == UNREACHABLE_POLLS - 1:
                raise
            sleep(POLL_S)
    raise AssertionError("unreachable")  # pragma: no cover


def outcome(g: Mapping[str, Any], kind: str = "gang") -> CliError | None:
    """None if the gang (job) succeeded, else the error to exit with."""
    if g["state"] == "SUCCEEDED":
        return None
    why = render.error_summary(g["error"]) if g.get("error") else (g.get("reason") or "")
    return CliError(f"{kind} {g['gang_id']} {g['state']}" + (f": {why}" if why else ""),
                    EXIT_API)
