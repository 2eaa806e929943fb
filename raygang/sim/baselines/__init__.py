"""Baseline schedulers' decision rules, as functions of raygang's cycle signature
`(snapshot, backlog, policy config, now) -> Plan`, so that the same control plane applies
them (`sim.loop`). Each module says which scheduler it follows and where its rules come
from."""
