"""One list of the scheduler's calls (`control.api`): the control plane offers each with
the protocol's parameters, the Ray actor forwards each, and the proxies the Python API and
the REST API call it through offer exactly these (issue 29: no call by a name that
nothing checks)."""

from __future__ import annotations

import asyncio
import inspect

import pytest

from raygang.control.api import SchedulerAPI, TrainAPI, calls
from raygang.control.plane import ControlPlane


def _params(function) -> list[inspect.Parameter]:
    return list(inspect.signature(function).parameters.values())[1:]  # without self


def _offers(implementation, protocol_method) -> None:
    """`implementation` takes the protocol's parameters, in order, with their defaults;
    any more it takes are optional."""
    wanted, given = _params(protocol_method), _params(implementation)
    name = protocol_method.__name__
    assert inspect.iscoroutinefunction(implementation), name
    assert [(p.name, p.kind, p.default) for p in given[:len(wanted)]] == \
        [(p.name, p.kind, p.default) for p in wanted], name
    assert all(p.default is not inspect.Parameter.empty for p in given[len(wanted):]), name


def test_the_protocols_list_the_calls_they_declare():
    assert calls(SchedulerAPI)[:3] == ["ping", "submit", "deploy"]
    assert "shutdown" in calls(SchedulerAPI) and "close" not in calls(SchedulerAPI)
    assert all(name.startswith("train_") for name in calls(TrainAPI))
    assert not set(calls(SchedulerAPI)) & set(calls(TrainAPI))


@pytest.mark.parametrize("name", calls(SchedulerAPI))
def test_the_control_plane_offers_each_call_with_its_parameters(name):
    _offers(getattr(ControlPlane, name), getattr(SchedulerAPI, name))


def test_the_ray_actor_forwards_every_call_to_its_plane():
    from raygang.runtime.scheduler.actor import Scheduler

    for name in calls(SchedulerAPI):
        assert inspect.iscoroutinefunction(getattr(Scheduler, name)), name
        assert getattr(Scheduler, name).__doc__ == getattr(SchedulerAPI, name).__doc__

    for name in calls(TrainAPI):
        _offers(getattr(Scheduler, name), getattr(TrainAPI, name))

    class Plane:  # what a forwarded call reaches, with its arguments as given
        async def status(self, *args, **kwargs):
            return ("status", args, kwargs)

    facade = Scheduler.__new__(Scheduler)
    facade._plane = Plane()
    assert asyncio.run(facade.status("g-1", extra=2)) == ("status", ("g-1",), {"extra": 2})


def test_the_async_proxy_offers_the_calls_and_nothing_else():
    from raygang.runtime.client.connection import AsyncScheduler

    made = []

    class Client:
        async def _acall(self, name, timeout, args, kwargs):
            made.append((name, timeout, args, kwargs))
            return name

    proxy = AsyncScheduler(Client())
    for name in calls(SchedulerAPI)[1:]:
        assert asyncio.run(getattr(proxy, name)("x")) == name
    assert asyncio.run(proxy.ping()) == "ping"
    assert made[0] == ("submit", None, ("x",), {})
    assert ("ping", 2.0, (), {}) in made  # the readiness probe does not wait for ever
    for unknown in ("train_claim", "close", "record", "_plane"):
        with pytest.raises(AttributeError):
            getattr(proxy, unknown)
