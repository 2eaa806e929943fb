"""A Serve application queued as one gang (its deployments are its roles)."""

from __future__ import annotations

from raygang.control.kinds.kind import Kind
from raygang.core.lifecycle import Phases

KIND = Kind(
    name="deployment",
    phases=Phases("capacity held on its nodes", "deploying the Serve app there",
                  "every replica running", "the Serve app ended"),
    by_name=True, keeps_its_nodes=True, serves_until_stopped=True, hands_off_at_start=True,
)
