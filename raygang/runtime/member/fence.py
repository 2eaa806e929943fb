"""A member cut off from the cluster ends its own process, so that no two attempts of a
gang run side by side.

A node cut off from the network keeps running: its raylet and the gang's members there go
on, unable to reach anyone. Ray's GCS declares the node dead when its health checks go
unanswered, and raygang restarts the node's gangs elsewhere. Nothing can tell the members
left on the cut-off node. When the network returns, Ray's raylet there learns that it was
declared dead and exits, and its workers after it, but only seconds later (3.4 s measured
here, tests/integration/node_cutoff.py), while the gang's new attempt runs: two members of
one rank working side by side, e.g. writing the same checkpoint. And a cut that outlasts
the rest of a body lets the cut-off attempt finish it: the body runs to its end twice.

So a thread in each member process asks the GCS every `CHECK_EVERY_S` whether the
member's node is alive (one `CheckAlive` call, ~0.4 ms; a thousand members make a thousand
small calls a second), and ends the process there and then:

- on the answer "dead", always: the cluster already counts this member as gone, and the
  gang's next attempt may be running elsewhere. A cut-off member hears it when the network
  returns (the overlap then ends within ~1.4 s instead of 3.4 s);
- with the gang's `fence_s` set, also once no call has been answered for `fence_s`: the
  lease. The scheduler starts the gang again no sooner than `fence_s` after it gave up the
  last attempt (core/lifecycle.py), and the GCS answered "alive" last before it declared the
  node dead, before the scheduler gave the attempt up: so the old attempt has ended before
  the new one starts, even while the cut lasts. The price: a GCS outage longer than
  `fence_s` ends the gang's members too, since a member cannot tell an outage of the GCS
  from its own node's cut.

Without `fence_s`, no answer is no decision: a running gang rides out a GCS outage
(tests/integration/test_gcs_outage.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import ray

from raygang.runtime.ray_private import node_alive

CHECK_EVERY_S = 1.0
EXIT_CODE = 75  # the member's process was fenced (visible in Ray's worker logs)

_watching: set[int] = set()  # processes (by pid: a forked child starts its own) fenced
_lock = threading.Lock()


def fence(node_id: str, lease_s: float | None = None) -> None:
    """Watch, once per process, that `node_id` (this member's node) is alive, and with
    `lease_s`, that the cluster answers at all. Only in a member actor's own process: a
    driver or a test that builds a member class in its process may connect to another
    cluster later, where the node is unknown ("dead"), and must not be ended for it."""
    if not ray.is_initialized() or ray.get_runtime_context().get_actor_id() is None:
        return
    with _lock:
        if os.getpid() in _watching:
            return
        _watching.add(os.getpid())
    threading.Thread(target=_watch, args=(node_id, lease_s), name="raygang-fence",
                     daemon=True).start()


def _watch(node_id: str, lease_s: float | None) -> None:
    every = CHECK_EVERY_S if lease_s is None else min(CHECK_EVERY_S, lease_s / 4)
    # A fenced member ends a little before its lease runs out: a process busy in native
    # code may run this thread late, and the scheduler waits only the lease itself.
    lease = None if lease_s is None else lease_s - min(1.0, lease_s / 5)
    answered = time.monotonic()  # the lease runs from the member's start
    while True:
        asked = time.monotonic()
        deadline = None if lease is None else answered + lease
        if deadline is not None and asked >= deadline:
            _end(f"the cluster has not answered for {lease:g}s (its fence_s is {lease_s:g}s): "
                 f"this node is cut off, or the GCS is down")
        try:
            alive: bool | None = node_alive(
                node_id, timeout_s=every if deadline is None else min(every, deadline - asked))
        except Exception:  # noqa: BLE001 - no answer: a GCS outage or a cut
            alive = None
        if alive is False:
            _end(f"the cluster declared this member's node {node_id} dead (cut off from the "
                 f"network?)")
        if alive:
            answered = asked  # the GCS counted the node alive after this moment, not before
        wake = asked + every
        if deadline is not None and alive is None:
            wake = min(wake, deadline)
        time.sleep(max(0.0, wake - time.monotonic()))


def _end(why: str) -> None:
    print(f"raygang: {why}; its gang runs again elsewhere, so this member's process ends now",
          file=sys.stderr, flush=True)  # in the worker's log, and the driver's
    os._exit(EXIT_CODE)  # now, from this thread: the body may be busy in any code
