"""Whether a plan is sound on its snapshot: what the equivalence tests and
`bench/core_scale.py` assert of every plan, fast search or plain (`check`)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING

from raygang.core import elastic
from raygang.core.fairshare import QueueBook
from raygang.core.gang import PendingGang
from raygang.core.plan import Plan
from raygang.core.preemption.trade import CheckpointWait, scarcest, stop_loss, waiting_cost
from raygang.core.preemption.victims import reclaim_protected
from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot, PlacedGang
from raygang.core.topology import broken
from raygang.core.usage import time_share

if TYPE_CHECKING:  # the config names the actions, which use the search
    from raygang.core.config import PolicyConfig


def reclaimable(book: QueueBook, pieces: Sequence[PlacedGang], config: PolicyConfig,
                now: float) -> dict[str, Resources]:
    """What reclaim may take from each queue in a cycle: of the gangs the walk leaves
    beyond the queue's quota and fair share, those it may stop, in the resources the
    queue's quota names (all, where it names none)."""
    kept = reclaim_protected(book, pieces, config.preemption.reclaim_victim_order, now)
    # With a trade ratio, a reclaim may stop a gang younger than its minimum runtime
    # (core.preemption.trade): `check` asserts the trade of each.
    least = 0.0 if config.preemption.reclaim_trade_ratio else \
        config.preemption.min_runtime_s("reclaim")
    amounts: dict[str, Resources] = {}
    for g in pieces:
        if g.gang_id in kept or not g.preemptible or g.draining or g.protected(now) or (
                least > 0 and (g.running_since is None or now - g.running_since < least)):
            continue
        amounts[g.queue] = amounts.get(g.queue, Resources()) + counted(g, config)
    return amounts


def _traded(gang: PendingGang, plan: Plan, running: dict[str, PlacedGang],
            config: PolicyConfig) -> bool:
    """Whether what `gang` waited can have been worth what its reclaims lose: its queue
    is below its quota by at most the quota, so its wait costs at most that much."""
    ratio = config.preemption.reclaim_trade_ratio
    spec = config.queue_tree.specs.get(gang.queue)
    if ratio is None or spec is None:
        return False
    most = waiting_cost(gang, spec.quota, Resources(), plan.at)
    victims = [running[p.victim] for p in plan.preemptions if p.preemptor == gang.gang_id]
    return most > 0 and most >= ratio * stop_loss(victims, scarcest(gang.total), plan.at)


def _saved_enough(gang: PendingGang, victim: PlacedGang, now: float,
                  config: PolicyConfig) -> bool:
    """Whether a reclaim for `gang` may stop `victim` now, by
    `reclaim_checkpoint_ratio`: its queue is below its quota by at most the quota, so a
    wait for the victim's checkpoint costs at most that much."""
    ratio = config.preemption.reclaim_checkpoint_ratio
    spec = config.queue_tree.specs.get(gang.queue)
    name = scarcest(gang.total)
    if ratio is None or spec is None or name is None:
        return True
    most = max(gang.total.units(name), spec.quota.units(name))
    return CheckpointWait(name, most, ratio, now)(victim)


def counted(gang: PlacedGang, config: PolicyConfig) -> Resources:
    """What a gang holds of the resources its queue's quota names (all, if none)."""
    spec = config.queue_tree.specs.get(gang.queue)
    return gang.total.only(frozenset(spec.quota)) if spec and spec.quota else gang.total


def check(plan: Plan, snapshot: ClusterSnapshot, pending: Sequence[PendingGang],
          config: PolicyConfig) -> None:
    """Assert that the plan is sound on this snapshot (elastic gangs read as their minimum
    plus one unit per surplus member, as the cycle reads them: `core.elastic`), and that
    every admission keeps its gang's topology (`core.topology.broken`)."""
    free = {n.node_id: n.free for n in snapshot.nodes}
    pieces, leaving_units = elastic.pieces(snapshot.placed)
    running = {g.gang_id: g for g in pieces}
    running.update({elastic.member_id(g.of, m): g for g in pieces if g.of is not None
                    for m in elastic.members_of(g.gang_id)})  # a ratio step's, by member
    leaving = [g for g in snapshot.placed if g.draining]  # stopping already: freeing soon
    leaving += [u for u in leaving_units if u.of not in {g.gang_id for g in leaving}]
    for gang in leaving:
        for node_id, bundle in gang.bundles:
            free[node_id] = free[node_id] + bundle
    gangs = {g.gang_id: g for g in pending}
    tree = config.queue_tree
    book = QueueBook(tree, snapshot.placed,  # the cycle's fair shares, to see what reclaim
                     time_share(config.usage, snapshot.usage, tree.paths))
    book.share_out(snapshot.alive_nodes, [g for g in pending if not tree.problem(g.spec)])
    amounts = reclaimable(book, pieces, config, plan.at)  # was allowed to take
    reclaimed: Counter[tuple[str, str]] = Counter()
    stopped: list[PlacedGang] = []  # whole gangs and units (a gang shrunk for one gang
    for p in plan.preemptions:  # may then be stopped whole for another: the rest goes)
        done = {v.gang_id for v in stopped}
        named = (running[elastic.member_id(p.victim, m)] for m in p.members)
        parts = list({u.gang_id: u for u in named}.values()) or [  # a ratio step once
            running[p.victim]] + [u for u in pieces if u.of == p.victim
                                  and u.gang_id not in done]
        assert not p.members or all(u.of == p.victim for u in parts), p
        stopped.extend(parts)
        if p.action == "reclaim":
            for part in parts:
                held = counted(part, config)
                reclaimed.update({(part.queue, k): held.units(k) for k in held})
    ids = [v.gang_id for v in stopped]
    assert len(set(ids)) == len(ids), "a gang or member was stopped twice"
    for p in plan.preemptions:
        victim, preemptor = running[p.victim], gangs[p.preemptor]
        first = running[elastic.member_id(p.victim, p.members[0])] if p.members else victim
        assert first.preemptible and not first.draining, p
        assert not first.protected(plan.at), p
        least = config.preemption.min_runtime_s(p.action)  # the action's own minimum
        assert least <= 0 or (victim.running_since is not None
                              and plan.at - victim.running_since >= least) or (
            p.action == "reclaim" and _traded(preemptor, plan, running, config)), p
        if p.members and victim.elastic is not None:
            assert _whole_steps(victim.elastic.steps, p.members, victim.elastic.surplus), p
        if p.action == "preempt":
            assert victim.priority < preemptor.priority, p
        elif p.action == "shrink":
            assert p.members and victim.queue == preemptor.queue, p
            assert victim.priority <= preemptor.priority, p
        else:
            assert p.action == "reclaim" and victim.queue != preemptor.queue, p
            assert _saved_enough(preemptor, victim, plan.at, config), p
    for (queue, name), units in reclaimed.items():
        assert units <= amounts.get(queue, Resources()).units(name), \
            f"reclaimed more of queue {queue} than it runs beyond its quota and fair share"
    for victim in stopped:
        for node_id, bundle in victim.bundles:
            free[node_id] = free[node_id] + bundle
    preempted = Counter(p.preemptor for p in plan.preemptions)
    # Capacity still being freed: per node, what admissions that wait for none of the
    # node's victims take must fit in what was free there before any victim was chosen.
    stopping: dict[str, set[str]] = {}
    for victim in stopped + leaving:
        for node_id, _ in victim.bundles:
            stopping.setdefault(node_id, set()).update(elastic.per_member([victim.gang_id]))
    settled = {n.node_id: n.free for n in snapshot.nodes}
    labels = {n.node_id: n.labels for n in snapshot.nodes}
    for a in plan.admissions:
        layout = gangs[a.gang_id].layout
        assert layout is None or broken(layout, a.nodes, labels) is None, \
            (a, broken(layout, a.nodes, labels))
        assert len(a.victims) >= preempted[a.gang_id], a
        assert set(a.victims) <= set(a.waits_for), a
        for node_id, bundle in zip(a.nodes, gangs[a.gang_id].bundles, strict=True):
            free[node_id] = free[node_id] - bundle
            if not stopping.get(node_id, set()) & set(a.waits_for):
                settled[node_id] = settled[node_id] - bundle
    placed = {g.gang_id: g for g in snapshot.placed}
    for growth in plan.growths:  # on settled capacity only, members it may add, in order
        e = placed[growth.gang_id].elastic
        assert e is not None and not e.leaving and growth.gang_id not in {
            p.victim for p in plan.preemptions}, growth
        assert growth.members == tuple(m for m, _ in e.missing[:len(growth.members)]), growth
        assert _whole_steps(e.steps, growth.members, [m for m, _ in e.missing]), growth
        for node_id, (_, bundle) in zip(growth.nodes, e.missing, strict=False):
            free[node_id] = free[node_id] - bundle
            settled[node_id] = settled[node_id] - bundle
    bad = [n for n, f in free.items() if not f.is_nonnegative()]
    assert not bad, f"oversubscribed nodes: {bad[:5]}"
    early = [n for n, f in settled.items() if not f.is_nonnegative()]
    assert not early, f"gangs take capacity still being freed without waiting: {early[:5]}"
    admitted = [a.gang_id for a in plan.admissions]
    assert len(set(admitted)) == len(admitted), "a gang was admitted twice"
    assert not set(admitted) & set(plan.waiting), "a gang both admitted and waiting"
    assert set(admitted) | set(plan.waiting) == set(gangs), "a pending gang was not decided"


def _whole_steps(steps: Sequence[Sequence[str]], moved: Sequence[str],
                 could: Sequence[str]) -> bool:
    """Of each ratio step that `moved` touches, it moves every member that `could` move
    (a step grows, and is taken back, whole)."""
    moved_set, could_set = set(moved), set(could)
    return all(set(step) & could_set <= moved_set for step in steps if moved_set & set(step))
