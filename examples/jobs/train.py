"""A plain Ray Train V2 script: nothing in it knows raygang.

What makes it resumable is what Train asks of any script: it reads its last checkpoint
(`ray.train.get_checkpoint()`), it saves one when Train says the run is being preempted
(`ray.train.get_preemption_info()`), and it keeps the same run name and storage path, so a
new attempt of the script finds the checkpoints of the last one.

    python examples/jobs/train.py STORAGE_DIR [STEPS]
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import ray
import ray.train
from ray.train import Checkpoint, RunConfig, ScalingConfig
from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer


def train_func(config: dict) -> None:
    step, checkpoint = 0, ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as d:
            step = json.loads(Path(d, "state.json").read_text())["step"]
    if ray.train.get_context().get_world_rank() == 0:
        print(f"worker 0 starts at step {step}", flush=True)
    while step < config["steps"]:
        time.sleep(0.5)  # one training step
        step += 1
        if ray.train.get_preemption_info() is not None:  # every worker asks: a barrier
            with tempfile.TemporaryDirectory() as d:
                Path(d, "state.json").write_text(json.dumps({"step": step}))
                ray.train.report({"step": step}, checkpoint=Checkpoint.from_directory(d))
            if ray.train.get_context().get_world_rank() == 0:
                print(f"preempted: checkpoint saved at step {step}", flush=True)
            while True:  # Train stops the workers at the deadline and restarts the run
                time.sleep(1)
        ray.train.report({"step": step})


if __name__ == "__main__":
    ray.init()
    steps = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    trainer = DataParallelTrainer(
        train_func, train_loop_config={"steps": steps},
        scaling_config=ScalingConfig(num_workers=2, use_gpu=True),
        run_config=RunConfig(name="resumable", storage_path=sys.argv[1]),
    )
    result = trainer.fit()
    print(f"training done: error={result.error}", flush=True)
