"""A disaggregated LLM service as one gang: 1 router (CPU), 2 prefill and 2 decode (GPU).

The three roles start together or not at all; the router starts only once every prefill
and decode worker is ready (`after`), so it never routes to a worker that is not there.
The gang has no run(): it is a service, RUNNING until cancelled. Its members are real
actors: the driver calls the router, and the router calls its peers.

    python examples/disaggregated_serving.py
"""

from __future__ import annotations

import itertools
import time

import ray

import raygang
from local_cluster import connect


@raygang.gang_task(num_gpus=1, num_cpus=0)
class Prefill:
    def __init__(self, model: str):
        time.sleep(0.5)  # load weights
        self.model = model

    def prefill(self, prompt: str) -> list[int]:
        return [ord(c) for c in prompt]  # the "KV cache"


@raygang.gang_task(num_gpus=1, num_cpus=0)
class Decode:
    def __init__(self, model: str):
        time.sleep(0.5)
        self.model = model

    def decode(self, kv: list[int], max_tokens: int) -> str:
        ctx = raygang.get_context()
        text = "".join(chr(t) for t in reversed(kv))[:max_tokens]
        return f"{text} [decode-{ctx.role_rank}]"


@raygang.gang_task(num_cpus=1)
class Router:
    def __init__(self):
        self.turn = itertools.count()

    def generate(self, prompt: str, max_tokens: int = 32) -> str:
        ctx = raygang.get_context()  # peers are set once the gang is released
        i = next(self.turn)
        prefill = ctx.peers_in("prefill")[i % 2]
        decode = ctx.peers_in("decode")[i % 2]
        return ray.get(decode.decode.remote(prefill.prefill.remote(prompt), max_tokens))


def main() -> dict:
    connect()
    raygang.start()
    service = raygang.gang(
        "llm",
        roles={
            "router": Router.options(after=["prefill", "decode"]),
            "prefill": Prefill.options(replicas=2).bind("tiny-llm"),
            "decode": Decode.options(replicas=2).bind("tiny-llm"),
        },
        strategy="PACK",
        priority="inference",
    )
    ref = service.remote()
    status = ref.ready(timeout=120)
    print(f"gang {ref.gang_id} is {status.state.value}; members in the order they became ready:")
    for m in sorted(status.members, key=lambda m: m.ready_at):
        print(f"  +{m.ready_at - status.submitted_at:5.2f}s  {m.role}-{m.index} (rank {m.rank})")
    router = ref.handles()["router"][0]
    answers = ray.get([router.generate.remote(p) for p in ["hello gang", "all or nothing"]])
    for answer in answers:
        print(f"  router -> {answer}")
    cancelled_at = time.time()
    final = ref.cancel()  # returns once members are killed and the placement group removed
    while ray.available_resources().get("GPU", 0) < 4 and time.time() - cancelled_at < 10:
        time.sleep(0.01)  # Ray reports the freed GPUs a few tens of ms later
    print(f"cancelled: {final.state.value}; all {ray.available_resources().get('GPU', 0):g} "
          f"GPUs free again {time.time() - cancelled_at:.2f}s after cancel()")
    raygang.shutdown()
    return {"status": status, "answers": answers, "final": final}


if __name__ == "__main__":
    main()
