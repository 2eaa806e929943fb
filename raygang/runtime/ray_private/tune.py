"""Ray Tune's private hooks raygang uses (re-exported by `raygang.runtime.ray_private`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

# Ray Tune's controller ---------------------------------------------------------------------
_tune_local = threading.local()
_tune_patch = threading.Lock()


@contextmanager
def tune_resource_manager(factory: Callable[[], Any]) -> Iterator[None]:
    """While inside, a Tune run started in this thread (`Tuner.fit`, `tune.run`) gets its
    resource manager from `factory`. `TuneController` takes a `resource_manager_factory`,
    but `tune.run` builds it without one and offers no way to pass one: `ray.tune.tune`'s
    `TuneController` is replaced (once, for good) by a subclass that passes the factory of
    the thread that runs it, and none in any other thread."""
    import ray.tune.tune as tune_module

    with _tune_patch:
        if not getattr(tune_module.TuneController, "_raygang", False):
            base = tune_module.TuneController

            class TuneController(base):  # type: ignore[misc, valid-type]
                _raygang = True

                def __init__(self, *args: Any, **kwargs: Any) -> None:
                    made = getattr(_tune_local, "factory", None)
                    if made is not None and kwargs.get("resource_manager_factory") is None:
                        kwargs["resource_manager_factory"] = made
                    super().__init__(*args, **kwargs)

                def on_step_begin(self) -> None:
                    # The manager acts on Tune's trials (pauses a preempted one) here, in
                    # Tune's loop between two events: never from inside its own calls
                    super().on_step_begin()
                    manager = self._actor_manager._resource_manager
                    step = getattr(manager, "on_tune_step", None)
                    if step is not None:
                        step(self)

            tune_module.TuneController = TuneController
    previous = getattr(_tune_local, "factory", None)
    _tune_local.factory = factory
    try:
        yield
    finally:
        _tune_local.factory = previous


def tune_trial_in_group(controller: Any, group: Any) -> Any | None:
    """The Tune trial whose actor runs in placement group `group`, if any: the controller's
    trial -> actor map and its actor manager's actor -> acquired resources (both private)."""
    held = controller._actor_manager._live_actors_to_ray_actors_resources
    for trial, tracked in controller._trial_to_actor.items():
        entry = held.get(tracked)
        if entry is not None and getattr(entry[1], "placement_group", None) == group:
            return trial
    return None
