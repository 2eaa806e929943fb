from __future__ import annotations

import time

import ray
from ray.util.state import list_actors

from raygang import GangRef, GangState
from raygang.runtime.names import NAMESPACE, SCHEDULER_NAME


def wait_state(ref: GangRef, *states: GangState, timeout: float = 60):
    """Poll until the gang is in one of `states`; returns its status."""
    deadline = time.time() + timeout
    while True:
        status = ref.status()
        if status.state in states:
            return status
        if status.finished or time.time() > deadline:
            raise AssertionError(
                f"{ref.gang_id} is {status.state.value}, wanted {[s.value for s in states]}: "
                f"{status.reason} {status.error}"
            )
        time.sleep(0.05)


def wait_until(what, timeout: float = 60, poll_s: float = 0.05):  # noqa: ANN001, ANN201
    """Poll `what()` until it returns something true; returns that."""
    deadline = time.time() + timeout
    while not (value := what()):
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(poll_s)
    return value


def scheduler():
    return ray.get_actor(SCHEDULER_NAME, namespace=NAMESPACE)


def restart_scheduler(timeout: float = 60) -> None:
    """Kill the scheduler's process (Ray restarts it) and wait until the new process is
    ready: a kill is asynchronous, and the old process may still answer a call or two."""
    old = ray.get(scheduler().ping.remote())["instance"]
    ray.kill(scheduler(), no_restart=False)
    deadline = time.monotonic() + timeout
    while True:
        try:
            ping = ray.get(scheduler().ping.remote(), timeout=5)
            if ping["instance"] != old and ping["ready"]:
                return
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError, ValueError):
            pass
        assert time.monotonic() < deadline, "the scheduler did not come back"
        time.sleep(0.05)


def actor_gone(name: str) -> bool:
    """Whether no live actor holds raygang's name `name` (Ray frees it once the GCS has
    the actor dead)."""
    try:
        ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return True
    return False


def stop_scheduler_for_good(timeout: float = 30) -> None:
    """Kill the scheduler's process so that Ray does not restart it (what happens while it
    is down is the test's; a kill while Ray restarts it races with the old process);
    returns once its process has exited. `raygang.start` starts another, which recovers.

    The GCS frees the name before the process is gone; until then its threads still run
    and may see, and record, what the test does next (a CI run once found a member killed
    "while the scheduler was down" recorded as the gang's failure by the dying process)."""
    [alive] = list_actors(filters=[("name", "=", SCHEDULER_NAME), ("state", "=", "ALIVE")])
    ray.kill(scheduler(), no_restart=True)
    wait_until(lambda: actor_gone(SCHEDULER_NAME), timeout)
    # Every test cluster is local: the scheduler's worker process is on this machine.
    wait_until(lambda: _exited(alive.pid), timeout)


def _exited(pid: int) -> bool:
    """Whether the local process `pid` has exited (a zombie has: only its entry is left)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_scheduler_ready(timeout: float = 60) -> None:
    """Until the scheduler answers and has recovered its gangs (`ping()["ready"]`)."""
    wait_until(lambda: ray.get(scheduler().ping.remote(), timeout=5)["ready"], timeout)
