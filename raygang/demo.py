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
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
