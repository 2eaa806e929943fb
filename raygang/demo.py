"""Small programs that REST and CLI submissions can name by import path, e.g.
`"entrypoint": "raygang.demo:train"`: the docs' walkthrough (docs/interfaces.md) and the tests use them.

Each is a real gang program: it reads its context, talks to its peers where it says so,
and honours preemption.
"""

from __future__ import annotations

import time

from raygang.runtime.member.context import get_context


def sleep(seconds: float = 1.0) -> dict:
    """Sleep (checking for preemption every 50 ms); returns the member's rank and node."""
    ctx = get_context()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and not ctx.preempted:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))
    return {"rank": ctx.rank, "world_size": ctx.world_size, "node_id": ctx.node_id,
            "preempted": ctx.preempted}


def train(steps: int = 10, step_s: float = 0.1) -> dict:
    """A toy data-parallel loop: `steps` steps, stopping early (as after a checkpoint)
    when preempted. Returns how many steps it ran."""
    ctx = get_context()
    done = 0
    for done in range(1, steps + 1):
        if ctx.preempted:
            break
        time.sleep(step_s)
    return {"rank": ctx.rank, "steps": done}


def fail(message: str = "boom") -> None:
    """Raise at once: to see how a failed gang is reported."""
    raise RuntimeError(message)


def __getattr__(name: str):
    # `raygang.demo:echo` is a Serve application for REST/CLI deployments; built on first
    # use so that importing the gang programs above does not import Ray Serve.
    if name == "echo":
        from ray import serve

        @serve.deployment(graceful_shutdown_timeout_s=2)
        class Echo:
            async def __call__(self, request) -> dict:
                import ray

                return {"node": ray.get_runtime_context().get_node_id(),
                        "path": request.url.path}

        # mypy keeps a decorated class's type: serve.deployment made it a Deployment.
        return Echo.bind()  # type: ignore[attr-defined]
    if name == "pd":
        return _pd()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _pd():  # noqa: ANN202 - a Serve Application (Serve imported here, not at module level)
    """`raygang.demo:pd`: a disaggregated service's shape (Serve LLM's: router -> decode ->
    prefill) on CPUs, stub models: one gang of a role per deployment that asks for
    resources (Prefill, Decode; the Router asks for none). GET /<name>?prompt=... answers
    the prompt reversed."""
    from ray import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0.1}, graceful_shutdown_timeout_s=1)
    class Prefill:
        def prefill(self, prompt: str) -> list[int]:
            return [ord(c) for c in prompt]  # the "KV cache"

    @serve.deployment(ray_actor_options={"num_cpus": 0.1}, graceful_shutdown_timeout_s=1)
    class Decode:
        def __init__(self, prefill):  # noqa: ANN001 - a DeploymentHandle
            self.prefill = prefill

        async def generate(self, prompt: str) -> str:
            kv = await self.prefill.prefill.remote(prompt)
            return "".join(chr(t) for t in reversed(kv))

    @serve.deployment(ray_actor_options={"num_cpus": 0}, graceful_shutdown_timeout_s=1)
    class Router:
        def __init__(self, decode):  # noqa: ANN001 - a DeploymentHandle
            self.decode = decode

        async def __call__(self, request) -> dict:  # noqa: ANN001
            prompt = request.query_params.get("prompt", "")
            return {"text": await self.decode.generate.remote(prompt), "path": request.url.path}

    return Router.bind(Decode.bind(Prefill.bind()))  # type: ignore[attr-defined]
