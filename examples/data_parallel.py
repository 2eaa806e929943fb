"""Data-parallel training as one gang: 4 workers, one GPU each, all or nothing.

Each worker holds a shard of a linear-regression data set. Every step it computes its
shard's gradient and all-reduces with its peers (their actor handles come from
`raygang.get_context()`), so every replica keeps the same weights, as with DDP.

Run it on a local Ray cluster with 4 virtual GPUs (no GPU needed):
    python examples/data_parallel.py
or on an existing cluster: RAY_ADDRESS=auto python examples/data_parallel.py
"""

from __future__ import annotations

import time

import numpy as np
import ray

import raygang
from local_cluster import connect

FEATURES = 8
TRUE_WEIGHTS = np.arange(1.0, FEATURES + 1)


@raygang.gang_task(replicas=4, num_gpus=1, strategy="SPREAD", max_concurrency=2)
class Trainer:
    """max_concurrency=2: a peer's gradient() call is served while run() is busy."""

    def __init__(self, samples: int, steps: int, lr: float):
        ctx = raygang.get_context()
        self.steps, self.lr = steps, lr
        rng = np.random.default_rng(ctx.rank)  # each rank its own shard
        self.x = rng.normal(size=(samples // ctx.world_size, FEATURES))
        self.y = self.x @ TRUE_WEIGHTS + rng.normal(scale=0.1, size=len(self.x))
        self.gpus = ray.get_gpu_ids()

    def gradient(self, w: np.ndarray) -> np.ndarray:
        return 2 * self.x.T @ (self.x @ w - self.y) / len(self.x)

    def loss(self, w: np.ndarray) -> float:
        return float(np.mean((self.x @ w - self.y) ** 2))

    def run(self) -> dict:
        """Called on every member at once, after all are ready (the launch barrier)."""
        ctx = raygang.get_context()
        w = np.zeros(FEATURES)
        for _ in range(self.steps):
            grads = ray.get([peer.gradient.remote(w) for peer in ctx.peers])  # all-reduce
            w -= self.lr * np.mean(grads, axis=0)
        return {"rank": ctx.rank, "gpus": self.gpus, "loss": self.loss(w), "w": w}


def main() -> list[dict]:
    connect()
    raygang.start()
    started = time.time()
    ref = Trainer.remote(4000, steps=60, lr=0.05)
    print(f"submitted gang {ref.gang_id}: 4 members x 1 GPU, SPREAD")
    results = ref.result(timeout=300)
    status = ref.status()
    for event in status.events:
        print(f"  +{event.at - status.submitted_at:5.2f}s  {event.to_state.value:<9} {event.reason}")
    for r, member in zip(results, status.members):
        print(f"  rank {r['rank']}  gpu {r['gpus']}  node {member.node_id[:8]}  "
              f"shard loss {r['loss']:.4f}")
    same = all(np.allclose(r["w"], results[0]["w"]) for r in results)
    error = float(np.max(np.abs(results[0]["w"] - TRUE_WEIGHTS)))
    print(f"replicas identical: {same}; max |w - w_true| = {error:.3f}; "
          f"{time.time() - started:.1f}s end to end")
    raygang.shutdown()
    return results


if __name__ == "__main__":
    main()
