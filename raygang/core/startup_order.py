"""The `after` graph of a gang's roles: a cycle in it is a spec error."""

from __future__ import annotations


def find_cycle(edges: dict[str, tuple[str, ...]]) -> list[str] | None:
    """A cycle in the `after` graph as a list of role names, or None."""
    state: dict[str, int] = {}  # 1 = on the current path, 2 = finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in edges.get(node, ()):
            if state.get(dep) == 1:
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None
