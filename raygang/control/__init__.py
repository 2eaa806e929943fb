"""The control plane, Ray-free: the scheduling loop, gang drivers, the registry of gangs,
the journal (what survives a restart) and recovery, behind small ports to the cluster.

Ray implements the ports in production (`raygang.runtime`); an in-memory cluster
(`control.memory`) implements them for fast tests and for replaying traces. Nothing here
imports Ray (import-linter checks it).
"""
