"""Which of an admitted gang's bundles a framework group inside it takes (a hand-off).

A Ray Job is admitted with a budget of bundles, each reserved on the node the plan chose.
A framework group its driver starts later (a Ray Train worker group) is placed inside that
budget: it takes whole bundles, each of its own bundles fitting in one of them, and its
placement group is pinned to their nodes. Nothing is admitted a second time against the
queue; the group counts against the job's budget only.

A decision, not an action: the runtime removes the taken bundles' holds and gives their
nodes to the framework.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from raygang.core.resources import Resources, scarcity_key


def take(held: Sequence[Resources], free: Collection[int],
         wanted: Sequence[Resources]) -> list[int] | None:
    """Indices of `free` held bundles, one per wanted bundle (in `wanted`'s order), each
    holding it; None if they cannot. Larger wanted bundles choose first, each taking the
    smallest held bundle that holds it (best fit: the larger ones stay for larger asks)."""
    order = sorted(range(len(wanted)), key=lambda i: _size(wanted[i]), reverse=True)
    left = sorted(free, key=lambda j: _size(held[j]))
    chosen: dict[int, int] = {}
    for i in order:
        fit = next((j for j in left if wanted[i].fits_in(held[j])), None)
        if fit is None:
            return None
        chosen[i] = fit
        left.remove(fit)
    return [chosen[i] for i in range(len(wanted))]


def never_fits(held: Sequence[Resources], wanted: Sequence[Resources]) -> str | None:
    """Why `wanted` can never be placed in this budget, even with all of it free."""
    if len(wanted) > len(held):
        return f"{len(wanted)} bundles asked, the budget has {len(held)}"
    if take(held, range(len(held)), wanted) is None:
        shapes = ", ".join(sorted({str(b) for b in held}))
        return f"bundles {wanted[0]} x{len(wanted)} do not fit the budget's bundles ({shapes})"
    return None


def _size(bundle: Resources) -> tuple[int, ...]:
    """Scarce resources first: a GPU outweighs any amount of CPU."""
    return tuple(bundle.units(name) for name in sorted(bundle, key=scarcity_key))
