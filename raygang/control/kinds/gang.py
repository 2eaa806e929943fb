"""A plain gang: member actors running the user's role programs, released together."""

from __future__ import annotations

from raygang.control.kinds.kind import Kind

KIND = Kind(name="gang")
