"""Ratio steps: elastic roles that grow and shrink together, in fixed proportions.

A gang may declare `ratio={"prefill": 2, "decode": 1}` over its elastic roles. Its
surplus then moves in whole *steps*: one step is 2 prefill members and 1 decode member,
added all together or not at all, and taken back all together (a victim search sees a
step as one unit: all its bundles). So the gang never holds prefill surplus without the
decode surplus that goes with it (role-ratio scaling, as peers on Kubernetes call it).

Rules (checked at the edge, `ratio_problem`): every role named is a role of the gang and
elastic; each one's surplus (`max - min`) is a whole number of its count per step; and all
of them allow the same number of steps, so that at its maximum the gang holds every role
at its maximum (a ratio that left one role's last members out of every step would leave
them growing on their own, which is what the ratio is there to forbid). Roles not in the
ratio grow one member at a time, as without one. The minimum is not cut in steps: it is
admitted whole whatever its proportions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

RoleRange = tuple[str, int, int]  # (role name, its minimum, its maximum)


def ratio_problem(sizes: Mapping[str, tuple[int, int] | None], ratio: Mapping[str, int],
                  what: str = "role") -> str | None:
    """Why `ratio` does not fit roles of these (min, max) sizes (`None`: a size not known
    yet, checked once it is), or None. `what`: how the message calls a role."""
    if not ratio:
        return (f"ratio: name at least one elastic {what} and its members per step, e.g. "
                '{"prefill": 2, "decode": 1}')
    steps: dict[str, int] = {}
    for name, count in ratio.items():
        if name not in sizes:
            return (f"ratio: {what} {name!r} is not one of the gang's {what}s (they are: "
                    f"{', '.join(sizes)})")
        size = sizes[name]
        if size is None:
            continue
        lo, hi = size
        if lo >= hi:
            return (f"ratio: {what} {name!r} is not elastic (replicas={hi}); a ratio steps "
                    f"elastic {what}s only: give it replicas=(min, max)")
        if (hi - lo) % count:
            return (f"ratio: {what} {name!r} grows by {count} per step, so its surplus "
                    f"(max {hi} - min {lo} = {hi - lo}) must be a whole number of steps "
                    f"(a multiple of {count})")
        steps[name] = (hi - lo) // count
    if len(set(steps.values())) > 1:
        allowed = ", ".join(f"{name}: {n}" for name, n in steps.items())
        return (f"ratio: its {what}s allow different numbers of steps ({allowed}); each "
                f"{what}'s max - min must be the same number of steps times its count")
    return None


def growth_units(roles: Sequence[RoleRange], ratio: Mapping[str, int] | None
                 ) -> tuple[tuple[str, ...], ...]:
    """The surplus members (`<role>-<index>`) in the order they grow, cut in the units
    that grow and shrink together: one per ratio step (its members, role by role in
    declaration order) and one per member of a role outside the ratio; ordered by the
    rank of their first member (without a ratio: every member alone, in rank order)."""
    ratio = ratio or {}
    rank: dict[str, int] = {}
    for name, _, hi in roles:
        for i in range(hi):
            rank[f"{name}-{i}"] = len(rank)
    stepped = [(name, lo, hi) for name, lo, hi in roles if name in ratio]
    n_steps = min(((hi - lo) // ratio[name] for name, lo, hi in stepped), default=0)
    units: list[tuple[str, ...]] = [
        tuple(f"{name}-{lo + k * ratio[name] + j}"
              for name, lo, _ in stepped for j in range(ratio[name]))
        for k in range(n_steps)]
    for name, lo, hi in roles:
        if name not in ratio:
            units.extend((f"{name}-{i}",) for i in range(lo, hi))
    units.sort(key=lambda unit: rank[unit[0]])
    return tuple(units)


def step_of(steps: Sequence[Sequence[str]]) -> dict[str, int]:
    """Member name -> the index of its step (members of no step are left out)."""
    return {member: i for i, step in enumerate(steps) for member in step}


GROWS_NO_FURTHER = "grows no further now: "  # how a gang's grow reason says why (grow.py)


def role_reasons(units: Sequence[Sequence[str]], held: set[str], role_of: Mapping[str, str],
                 most: Mapping[str, int], size: Mapping[str, int],
                 gang_reason: str | None) -> dict[str, str | None]:
    """Why each role of a running elastic gang is not larger: at its maximum; else, if the
    gang grows no further (`gang_reason`, the grow action's), that reason for the roles of
    the unit that grows next (`units`: the gang's growth order, `held`: the members it
    holds), and for the others that the unit comes first (members grow in order). None: it
    is growing (or not running, so no reason was given)."""
    why = None if gang_reason is None else gang_reason.split(GROWS_NO_FURTHER, 1)[-1]
    upcoming = next((u for u in units if not set(u) <= held), ())
    waiting = [m for m in upcoming if m not in held]
    out: dict[str, str | None] = {}
    for role, n in most.items():
        if size[role] >= n:
            out[role] = f"at its maximum ({n})"
        elif why is None:
            out[role] = None
        elif any(role_of[m] == role for m in waiting):
            out[role] = why
        else:
            out[role] = f"members grow in order and {', '.join(waiting)} come(s) first: {why}"
    return out
