"""The kinds of workload the plane queues, by name: plain gangs, Serve applications, Ray
Jobs, Ray Train runs, Ray Tune trials.

Each is a module here with one `Kind` (what the plane needs to know of it, without Ray:
its durable payload, how it is named, the words of its history, which features it has)
and, on the Ray side, a module of `runtime.kinds` registered under the same name (how it
runs and how a restarted scheduler adopts it). Adding a kind is a module on each side and
one line in each registry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from raygang.control.kinds import deployment, gang, job, train, tune
from raygang.control.kinds.kind import Kind

T = TypeVar("T")

KINDS: Mapping[str, Kind] = {
    kind.name: kind for kind in (gang.KIND, deployment.KIND, job.KIND, train.KIND, tune.KIND)
}


# The kinds whose reserved nodes a library's own group takes (`ControlPlane.submit_train`)
HANDED_OVER = ("train", "tune")


def handed_over(name: str) -> str:
    """`name`, if it is a kind handed over to a library's group; else ValueError."""
    if name not in HANDED_OVER:
        raise ValueError(f"kind {name!r}: a hand-off to a library is one of "
                         f"{', '.join(HANDED_OVER)}")
    return name


class UnknownKindError(ValueError):
    """A gang record names a kind this raygang does not know."""


def of(name: str) -> Kind:
    """The kind registered as `name`; raises `UnknownKindError` naming the known ones."""
    return find(KINDS, name)


def find(registry: Mapping[str, T], name: str) -> T:
    """`registry[name]` (a registry of kinds by name, this one or the Ray side's); raises
    `UnknownKindError` naming the known ones."""
    try:
        return registry[name]
    except KeyError:
        raise UnknownKindError(
            f"unknown kind {name!r}: known kinds are {', '.join(sorted(registry))}") from None


__all__ = ["HANDED_OVER", "KINDS", "Kind", "UnknownKindError", "find", "handed_over", "of"]
