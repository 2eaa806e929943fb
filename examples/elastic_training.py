"""An elastic data-parallel gang on 4 GPUs: it starts at its minimum, grows when GPUs free,
gives its surplus to a more urgent gang instead of being stopped, and grows back.

`replicas=(2, 4)`: the minimum (2) is admitted all or nothing; each member beyond it is
added live, in a placement group of its own, and every member is told the new world
(`on_resize`) before the new one starts; a member removed is told first, as a preempted
gang is (`preemption_grace_s`). Nobody restarts.

    python examples/elastic_training.py
"""

from __future__ import annotations

import time

import ray

import raygang
from local_cluster import connect


@raygang.gang_task(num_gpus=1, num_cpus=0)
class Hold:
    """Another workload holding GPUs until cancelled."""


@ray.remote(num_cpus=0)
class Log:
    """Where the members write what they were told (the script prints it at the end)."""

    def __init__(self):
        self.worlds: dict[str, list[int]] = {}

    def told(self, member: str, size: int) -> None:
        self.worlds.setdefault(member, []).append(size)

    def get(self) -> dict[str, list[int]]:
        return self.worlds


@raygang.gang_task(role="worker", replicas=(2, 4), num_gpus=1, num_cpus=0,
                   preemption_grace_s=5)
class Trainer:
    def __init__(self, log):
        self.log = log

    def on_resize(self, world: raygang.World):
        # Here a real trainer re-forms its collective group on world.peers, world.rank.
        ctx = raygang.get_context()
        ray.get(self.log.told.remote(f"{ctx.role}-{ctx.role_rank}", world.size))

    def run(self):
        ctx = raygang.get_context()
        while not ctx.preempted:  # until cancelled, or (a member removed) told to go
            time.sleep(0.05)  # a training step, on ctx.world_size members


def wait_until(what, timeout: float = 120):
    deadline = time.time() + timeout
    while not what():
        if time.time() > deadline:
            raise TimeoutError(what)
        time.sleep(0.05)


def actor_ids(gang_id: str) -> list[str]:
    return [ray.get_actor(f"raygang-{gang_id}-worker-{i}", namespace="raygang")._actor_id.hex()
            for i in (0, 1)]


def main() -> None:
    connect(num_gpus=4)
    raygang.start()
    log = Log.remote()
    other = Hold.options(name="other", replicas=2).remote()
    wait_until(lambda: other.status().state.value == "RUNNING")
    trainer = Trainer.remote(log)
    wait_until(lambda: trainer.status().state.value == "RUNNING")
    s = trainer.status()
    print(f"other holds 2 GPUs; trainer RUNNING at world size {s.world_size} "
          f"(elastic: {s.min_size} to {s.max_size})")
    first = actor_ids(trainer.gang_id)

    other.cancel()
    wait_until(lambda: trainer.status().world_size == 4)
    print("other ended: trainer grew to 4, live")

    urgent = Hold.options(name="urgent", replicas=2, priority="inference").remote()
    wait_until(lambda: urgent.status().state.value == "RUNNING"
               and trainer.status().world_size == 2)
    s = trainer.status()
    print(f"urgent RUNNING on 2 GPUs: trainer shrank to {s.world_size}, "
          f"state {s.state.value}, preemptions {s.preemptions}, restarts {s.restarts}")

    urgent.cancel()
    # The status counts members from when they are booked; the staying ones are told once
    # the new ones are ready.
    wait_until(lambda: ray.get(log.get.remote()).get("worker-0", [])[-1:] == [4])
    s = trainer.status()
    print(f"urgent ended: trainer grew back to {s.world_size}; worker-0 and worker-1 the "
          f"same actors throughout: {actor_ids(trainer.gang_id) == first}, restarts "
          f"{s.restarts}, preemptions {s.preemptions}")
    for member, sizes in sorted(ray.get(log.get.remote()).items()):
        print(f"  {member} told of worlds of {' -> '.join(map(str, sizes))}")
    trainer.cancel()
    raygang.shutdown()


if __name__ == "__main__":
    main()
