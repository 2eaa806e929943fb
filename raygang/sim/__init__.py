"""`raygang sim`: replay a cluster trace through raygang's control plane in virtual time.

Light on import (the `raygang` command line loads this package for its `sim` command):
the Python API is loaded when first used.

    from raygang.sim import SimSettings, load_philly, simulate
    trace = load_philly("philly_jobs_sep_oct.csv.gz", start="2017-10-02", days=7, nodes=80)
    result = simulate(trace, ["raygang", "fifo"], SimSettings(nodes=80))
    print(result.table())
"""

from __future__ import annotations

from raygang._lazy import lazy_exports

_API = {
    "simulate": "raygang.sim.api", "Comparison": "raygang.sim.api",
    "load_csv": "raygang.sim.trace", "Trace": "raygang.sim.trace",
    "TraceError": "raygang.sim.trace", "TraceJob": "raygang.sim.trace",
    "load_philly": "raygang.sim.philly", "load_helios": "raygang.sim.helios",
    "SimSettings": "raygang.sim.settings",
    "POLICIES": "raygang.sim.policies",
}

__all__ = sorted(_API)


__getattr__ = lazy_exports(__name__, _API, globals())
