"""The first process of a raygang job's driver: it runs the entrypoint and, when Ray stops
the job, ends the entrypoint's whole process group before it exits itself.

Why: Ray's job supervisor starts the entrypoint with `sh -c` in a session of its own, and
stops it by signalling the processes it finds at that moment (the shell and its
descendants), then marks the job STOPPED once those are gone. A process forked a moment
later, such as the `python` of `export …; python train.py` that dash forks, is not among
them: it outlives the stop, and a preempted job's next attempt ran beside it (a clean-clone
run of `tests/integration/test_job_race.py`; reproduced without Ray in
`tests/unit/test_job_process_group.py`). A signal sent to a process group is delivered to
a child forked at the same time too (the kernel restarts the fork), so signalling the group
leaves none behind.

Run as a script, with the standard library only (`python -I process_group.py GRACE
COMMAND`): it must start before the driver's runtime env matters, in a few milliseconds.
Ray's supervisor `exec`s it (see `driver_command`), so it is the process Ray signals:

- SIGTERM or SIGINT: sent on to the whole group; after GRACE seconds, what is left of the
  group is killed (SIGKILL), this process with it. It exits once no other process of the
  group is left, so Ray's STOPPED means the entrypoint is gone.
- The entrypoint ends on its own: processes it left in the background are ended the same
  way (Ray would kill them only once its supervisor actor exits), and its exit code is
  this process's.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

POLL_S = 0.05
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def others_in_group(group: int) -> list[int]:
    """Live processes of process group `group` other than this one (zombies are gone:
    their files, locks included, are closed). Where there is no /proc, none are known."""
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                # pid (comm) state ppid pgrp …: comm may hold spaces and parentheses.
                fields = stat.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # it ended while the directory was read
        if fields[0] != "Z" and int(fields[2]) == group:
            found.append(int(entry))
    return found


def end_group(group: int, sig: int, grace_s: float) -> None:
    """Send `sig` to the group, wait up to `grace_s` for the others to end, then kill what
    is left (this process included)."""
    for each in STOP_SIGNALS:
        signal.signal(each, signal.SIG_IGN)  # the group's signal reaches this process too
    try:
        os.killpg(group, sig)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while others_in_group(group) and time.monotonic() < deadline:
        time.sleep(POLL_S)
    if others_in_group(group):
        os.killpg(group, signal.SIGKILL)


def main(grace_s: float, command: str) -> int:
    stopped: list[int] = []

    def on_stop(sig: int, _frame: object) -> None:
        stopped.append(sig)

    for sig in STOP_SIGNALS:  # before the entrypoint is started: no moment unwatched
        signal.signal(sig, on_stop)
    if os.getpgrp() != os.getpid():
        # Not started as Ray starts it (in a session of its own): a group of its own, so
        # that ending it never reaches the process that started this one.
        os.setpgid(0, 0)
    group = os.getpgrp()
    if stopped:
        return 128 + stopped[0]
    child = subprocess.Popen(command, shell=True)
    while child.poll() is None and not stopped:
        time.sleep(POLL_S)
    if stopped:
        end_group(group, stopped[0], grace_s)
        child.wait()
        return 128 + stopped[0]
    if others_in_group(group):  # the entrypoint left processes behind: end them too
        end_group(group, signal.SIGTERM, grace_s)
    return child.returncode


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1]), sys.argv[2]))
