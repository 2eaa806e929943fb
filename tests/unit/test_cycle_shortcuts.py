"""Work a cycle skips or keeps from the cycle before, and that it decides the same as
doing it all (issue 30: a simulator fast enough to sweep). Each shortcut has a case
where it must not apply."""

from __future__ import annotations

import dataclasses
import math
import random
import sys

import pytest

from raygang.core import PolicyConfig, Scheduler, reasons, schedule
from raygang.core.actions import ACTIONS
from raygang.core.backlog import Backlog, Line, run_starts
from raygang.core.cycle import Cycle
from raygang.core.domain_reasons import why_not_placed
from raygang.core.fairshare import QueueBook
from raygang.core.plan import WaitCode
from raygang.core.resources import Sums
from raygang.core import walk as walk_module

from tests.unit.builders import busy, cluster, gang, queue, res, running

TWO_NODES = ("w-1: GPU=4", "w-2: GPU=4")


def _teams(**preemption: object) -> PolicyConfig:
    """Two teams under reclaim's fixed rules (no trade unless asked for: the cases below
    are about the delay and the minimum runtime themselves)."""
    return PolicyConfig(queues=[queue("team-a", quota="GPU=4"), queue("team-b", quota="GPU=4")],
                        preemption={"reclaim_trade_ratio": None, **preemption})


def _borrowed() -> object:
    """team-a runs 8 GPUs, 4 of them borrowed (a-new)."""
    return busy(*TWO_NODES, placed=[
        running("a-old", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-new", "w-2: 4xGPU=1", queue="team-a", since=10.0),
    ])


def _b(name: str, since: float, seq: int):
    return gang(name, "4xGPU=1", "STRICT_PACK", priority="training", queue="team-b",
                since=since, seq=seq)


# Reclaim's delay before its pool ------------------------------------------------------------
def test_a_gang_in_its_reclaim_delay_builds_no_reclaim_pool_and_says_why():
    cycle = Cycle(_borrowed(), _teams(reclaim_min_runtime_s=0, reclaim_delay_s=300), 1100.0)
    plan = cycle.run(Backlog.of([_b("b-1", since=1000.0, seq=0)]))
    assert plan.preemptions == ()
    assert "it may reclaim once pending reclaim_delay_s 300 s (in 200 s)" in \
        plan.waiting["b-1"].message
    # Nobody searched: the stoppable gangs were neither sorted nor walked for shares.
    assert "reclaim" not in cycle._pools and "reclaim kept" not in cycle.memo


def test_a_gang_past_its_delay_behind_one_in_it_still_reclaims():
    """The pool is built for the first gang that may search: the same pool, the same
    victim, as when the gang in its delay built it."""
    cycle = Cycle(_borrowed(), _teams(reclaim_min_runtime_s=0, reclaim_delay_s=300), 1100.0)
    plan = cycle.run(Backlog.of([_b("b-1", since=1000.0, seq=0),
                                 _b("b-2", since=0.0, seq=1)]))
    assert [(p.victim, p.preemptor) for p in plan.preemptions] == [("a-new", "b-2")]
    assert "in 200 s" in plan.waiting["b-1"].message
    assert "reclaim" in cycle._pools



# preempt where nobody runs below ------------------------------------------------------------
def _full(priority: int) -> object:
    return busy(*TWO_NODES, placed=[
        running("t-1", "w-1: 4xGPU=1", priority=100, since=0.0),
        running("t-2", "w-2: 4xGPU=1", priority=priority, since=0.0)])


def test_with_nobody_running_below_it_preempt_sorts_no_pool_and_says_so():
    cycle = Cycle(_full(priority=100), PolicyConfig(), 10.0)
    plan = cycle.run(Backlog.of([gang("g", "4xGPU=1", "STRICT_PACK", priority="training")]))
    assert plan.preemptions == ()
    assert plan.waiting["g"].message.endswith(
        "; no lower-priority preemptible gang runs that it may preempt")
    assert "preempt" not in cycle._pools and "newest" not in cycle._sorted


def test_one_gang_running_below_it_is_preempted_as_before():
    cycle = Cycle(_full(priority=10), PolicyConfig(), 10.0)
    plan = cycle.run(Backlog.of([gang("g", "4xGPU=1", "STRICT_PACK", priority="training")]))
    assert [(p.victim, p.action) for p in plan.preemptions] == [("t-2", "preempt")]
    assert "preempt" in cycle._pools


def test_with_nobody_below_preempt_still_places_on_what_reclaim_freed():
    """The preempt pass places a gang on what an earlier action's victims left free,
    with or without a pool: reclaim stops a-2 (4 GPUs) for b-1 (2 GPUs), and c-1, whose
    queue has no quota to reclaim for, takes the other 2 in the preempt pass."""
    snapshot = busy(*TWO_NODES, placed=[
        running("a-1", "w-1: 4xGPU=1", queue="team-a", since=0.0),
        running("a-2", "w-2: 4xGPU=1", queue="team-a", since=5.0)])
    config = PolicyConfig(
        queues=[queue("team-a"), queue("team-b", quota="GPU=8"), queue("team-c")],
        preemption={"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0})
    b1 = gang("b-1", "2xGPU=1", "PACK", priority="training", queue="team-b", seq=0)
    c1 = gang("c-1", "2xGPU=1", "PACK", priority="training", queue="team-c", seq=1)
    cycle = Cycle(snapshot, config, 10.0)
    plan = cycle.run(Backlog.of([b1, c1]))
    assert [(p.victim, p.preemptor) for p in plan.preemptions] == [("a-2", "b-1")]
    assert sorted((a.gang_id, a.action) for a in plan.admissions) == [
        ("b-1", "reclaim"), ("c-1", "allocate")]
    assert "preempt" not in cycle._pools


# A reason's words kept while the capacity is the same ---------------------------------------
def _counting(monkeypatch) -> list[object]:
    calls: list[object] = []

    def why(bundles, strategy, capacity, layout):  # type: ignore[no-untyped-def]
        calls.append(layout)
        return why_not_placed(bundles, strategy, capacity, layout)

    monkeypatch.setattr(reasons, "why_not_placed", why)
    return calls


@pytest.fixture
def scheduler() -> Scheduler:
    """One scheduler's cycles: its memory keeps the words from one to the next."""
    return Scheduler()


def _waiting(scheduler: Scheduler, *nodes: str, name: str = "g") -> str:
    g = gang(name, "GPU=3", "STRICT_PACK", priority="training")
    return scheduler(cluster(*nodes), [g], PolicyConfig(), 10.0).waiting[name].message


def test_without_a_scheduler_s_memory_a_reason_is_worked_out_each_cycle(monkeypatch,
                                                                        scheduler):
    """`schedule` alone keeps nothing from one call to the next (no module state)."""
    calls = _counting(monkeypatch)
    g = gang("g", "GPU=3", "STRICT_PACK", priority="training")
    nodes = ("w-1: GPU=4 free GPU=2", "w-2: GPU=4 free GPU=1")
    first = schedule(cluster(*nodes), [g], PolicyConfig(), 10.0).waiting["g"].message
    assert schedule(cluster(*nodes), [g], PolicyConfig(), 10.0).waiting["g"].message == first
    assert first == _waiting(scheduler, *nodes) and len(calls) == 3


def test_two_schedulers_keep_their_words_apart(monkeypatch, scheduler):
    calls = _counting(monkeypatch)
    nodes = ("w-1: GPU=4 free GPU=2", "w-2: GPU=4 free GPU=1")
    _waiting(scheduler, *nodes)
    other = Scheduler()
    g = gang("g", "GPU=3", "STRICT_PACK", priority="training")
    other(cluster(*nodes), [g], PolicyConfig(), 10.0)
    assert len(calls) == 2
    kept = other.memory.unplaced
    other(cluster(*nodes), [gang("h", "GPU=4", "STRICT_PACK", priority="training")],
          PolicyConfig(), 10.0)
    assert len(calls) == 3  # a new shape: a new entry, the one kept before left as it was
    assert other.memory.unplaced is not kept and len(kept[1]) == 1
    assert len(other.memory.unplaced[1]) == 2


def test_a_reason_is_worked_out_once_while_the_capacity_ends_the_same(monkeypatch, scheduler):
    calls = _counting(monkeypatch)
    first = _waiting(scheduler, "w-1: GPU=4 free GPU=2", "w-2: GPU=4 free GPU=1")
    again = _waiting(scheduler, "w-1: GPU=4 free GPU=2", "w-2: GPU=4 free GPU=1", name="h")
    assert first == again
    assert first.startswith("needs {GPU: 3} on one node (STRICT_PACK, 1×{GPU: 3}); "
                            "largest free GPU on one node is 2 (node w-1);")
    assert len(calls) == 1


def test_a_reason_is_worked_out_again_when_what_is_free_or_a_name_changed(monkeypatch,
                                                                          scheduler):
    calls = _counting(monkeypatch)
    _waiting(scheduler, "w-1: GPU=4 free GPU=2", "w-2: GPU=4 free GPU=1")
    # The same free vectors, on other nodes; then another node.
    assert "largest free GPU on one node is 2 (node w-2);" in _waiting(scheduler,
        "w-1: GPU=4 free GPU=1", "w-2: GPU=4 free GPU=2")
    assert "(node w-3);" in _waiting(scheduler, "w-1: GPU=4 free GPU=1", "w-3: GPU=4 free GPU=2")
    assert len(calls) == 3


def test_a_gang_with_a_topology_has_its_reason_worked_out_each_cycle(monkeypatch, scheduler):
    calls = _counting(monkeypatch)
    nodes = ("w-1: GPU=4 @zone=a free GPU=2", "w-2: GPU=4 @zone=b free GPU=2")
    for name in ("g", "h"):
        g = gang(name, "GPU=3", "STRICT_PACK", priority="training",
                 topology={"required": "zone"})
        scheduler(cluster(*nodes), [g], PolicyConfig(), 10.0)
    assert len(calls) == 2 and all(layout is not None for layout in calls)


# Sums kept while the vectors are the same ---------------------------------------------------
def test_a_sum_is_kept_for_the_very_same_vectors_and_made_anew_for_others():
    sums = Sums()
    a, b = res("GPU=1"), res("GPU=2 CPU=4")
    first = sums.of("q", [a, b])
    assert sums.of("q", [a, b]) is first  # the same objects, in order: kept
    equal = res("GPU=2 CPU=4")  # equal but another object (a gang's view made again)
    assert sums.of("q", [a, equal]) is not first and sums.of("q", [a, equal]) == first
    assert sums.of("q", [a, equal, a]) == res("GPU=4 CPU=4")  # one more
    assert sums.of("q", [a]) == a  # one fewer
    assert sums.of("other", [b]) == b and sums.of("q", [a]) == a  # by name


def test_the_book_counts_a_queue_again_when_one_of_its_gangs_changed():
    config = _teams()
    placed = [running("a-1", "w-1: 2xGPU=1", queue="team-a"),
              running("a-2", "w-2: GPU=1", queue="team-a"),
              running("b-1", "w-2: GPU=1", queue="team-b")]
    assert QueueBook(config.queue_tree, placed).usage["team-a"] == res("GPU=3")
    placed[1] = running("a-2", "w-2: 3xGPU=1", queue="team-a")  # grew: a new view
    book = QueueBook(config.queue_tree, placed)
    assert book.usage["team-a"] == res("GPU=5") and book.usage["team-b"] == res("GPU=1")
    assert QueueBook(config.queue_tree, placed[:2]).usage["team-b"] == res()  # it ended


# A pass that cannot act is not made -------------------------------------------------------
def _random_cycle(seed: int) -> tuple[object, list[object], PolicyConfig]:
    """Two queues over 2-5 nodes of 4 GPUs, some running gangs of each (some young), and
    pending ones of both queues, of two priorities, pending since various times."""
    rng = random.Random(seed)
    nodes = [f"w-{i}: GPU=4" for i in range(rng.randint(2, 5))]
    placed, free = [], {f"w-{i}": 4 for i in range(len(nodes))}
    for i in range(rng.randint(0, 2 * len(nodes))):
        node = rng.choice(sorted(n for n, left in free.items() if left) or ["-"])
        if node == "-":
            break
        size = rng.randint(1, free[node])
        free[node] -= size
        placed.append(running(f"r-{i}", f"{node}: {size}xGPU=1", queue=rng.choice("ab"),
                              since=rng.choice([None, 0.0, 900.0, 3500.0])))
    pending = [gang(f"p-{i}", f"{rng.choice([1, 1, 2, 4, 8])}xGPU=1",
                    rng.choice(["PACK", "STRICT_PACK", "SPREAD"]),
                    priority=rng.choice(["training", "training", "inference"]),
                    queue=rng.choice("ab"), since=rng.choice([None, 0.0, 2000.0, 3900.0]),
                    seq=i)
               for i in range(rng.randint(1, 12))]
    config = PolicyConfig(
        queues=[queue("a", quota="GPU=4"), queue("b", quota=f"GPU={4 * len(nodes) - 4}")],
        backfill_lookahead=rng.choice([0, 1, 4]), sla_waiting_time_s=rng.choice([None, 1800.0]),
        preemption={"reclaim_delay_s": rng.choice([0, 300]),
                    "reclaim_min_runtime_s": rng.choice([0, 900])},
        sla_max_holds=rng.choice([1, 1, 3]))  # drawn last: the scenarios stay as they were
    return busy(*nodes, placed=placed), pending, config


def test_a_shrink_pass_with_no_surplus_anywhere_is_skipped_and_decides_nothing_else():
    """Skipped (shrink's `idle`) and made, the plans are equal: admissions, stops, every
    reason and who waits behind whom."""
    made = {**ACTIONS, "shrink": dataclasses.replace(ACTIONS["shrink"], idle=None)}
    outcomes = set()
    for seed in range(300):
        snapshot, pending, config = _random_cycle(seed)
        plan = schedule(snapshot, pending, config, 4000.0)
        assert plan == schedule(snapshot, pending, config, 4000.0, actions=made), seed
        outcomes.update({p.action for p in plan.preemptions} | {bool(plan.admissions)})
    assert outcomes >= {True, False, "reclaim", "preempt"}  # the cases reach every action


def test_a_shrink_pass_first_is_made_even_with_no_surplus():
    """First, it is the pass that looks at the lines: a cycle of shrink alone still says
    why each gang waits as it looked at it."""
    snapshot, pending, config = _random_cycle(3)
    only = config.model_copy(update={"actions": ("shrink",)})
    calls = []
    watched = dataclasses.replace(ACTIONS["shrink"], attempt=lambda c, g: calls.append(g) or False)
    schedule(snapshot, pending, only, 4000.0, actions={**ACTIONS, "shrink": watched})
    assert calls


# When the clock alone may change a decision (core.clock, Plan.steady_until) ---------------
def _steady(now: float, since: float, **preemption: object) -> float | None:
    plan = schedule(_borrowed(), [_b("b-1", since=since, seq=0)], _teams(**preemption), now)
    return plan.steady_until


def test_a_plan_is_steady_until_a_delay_it_waited_out_ends():
    assert _steady(1100.0, 1000.0, reclaim_min_runtime_s=0, reclaim_delay_s=300) == 1300.0


def test_a_plan_is_steady_until_the_minimum_runtime_that_kept_a_victim_ends():
    # a-new (beyond team-a's quota, started at 10) may be stopped from 910.
    assert _steady(500.0, 0.0, reclaim_min_runtime_s=900, reclaim_delay_s=0,
                   reclaim_victim_order="newest") == 910.0


def test_a_plan_is_not_steady_where_a_search_in_the_cheapest_order_found_no_room():
    # Which gangs go first, and which a queue keeps, moves with their work since a
    # checkpoint: a search later may find room where this one did not.
    assert _steady(500.0, 0.0, reclaim_min_runtime_s=900, reclaim_delay_s=0,
                   reclaim_victim_order="cheapest") == 500.0


def test_a_plan_is_not_steady_where_a_trade_weighs_the_wait():
    assert _steady(1100.0, 1000.0, reclaim_delay_s=300, reclaim_trade_ratio=1.0) == 1100.0


def test_a_plan_with_nothing_held_back_by_the_clock_is_steady_until_a_change():
    plan = schedule(_borrowed(), [], _teams(), 500.0)
    assert plan.steady_until == math.inf
    # Trades on, but none weighed: nothing moves with the clock
    assert schedule(_borrowed(), [], _teams(reclaim_trade_ratio=1.0), 500.0).steady_until \
        == math.inf
    teams = _teams(reclaim_min_runtime_s=0, reclaim_delay_s=0).model_copy(
        update={"sla_waiting_time_s": 14_400.0})
    late = schedule(_borrowed(), [_b("b-1", since=0.0, seq=0)], teams, 500.0)
    assert late.preemptions and late.steady_until == 14_400.0  # its wait may reach the SLA
    teams = teams.model_copy(update={"sla_waiting_time_s": None})
    held = schedule(_borrowed(), [_b("b-1", since=0.0, seq=0)], teams, 500.0)
    assert held.preemptions and held.steady_until == math.inf


# Reasons worked out when first read ----------------------------------------------------------
def test_a_backlogs_reasons_are_worked_out_once_when_first_read(monkeypatch):
    calls = []
    explain = reasons.Reasons.explain
    monkeypatch.setattr(reasons.Reasons, "explain",
                        lambda self, eager: calls.append(eager) or explain(self, eager))
    teams = _teams(reclaim_min_runtime_s=0, reclaim_delay_s=300)
    pending = [_b("b-1", since=1000.0, seq=0)]
    plan = schedule(_borrowed(), Backlog.of(pending), teams, 1100.0)
    assert calls == []  # a replay reads none (control.loop's `explains`)
    assert "(in 200 s)" in plan.waiting["b-1"].message
    assert "(in 200 s)" in plan.waiting["b-1"].message
    assert calls == [False]
    listed = schedule(_borrowed(), pending, teams, 1100.0)  # a list: explained at once
    assert calls == [False, True]
    assert listed == plan


# A best-effort line jumps over runs of one kind ------------------------------------------
KINDS = [("1xGPU=1", "PACK", "training"), ("2xGPU=1", "PACK", "training"),
         ("4xGPU=1", "STRICT_PACK", "training"), ("8xGPU=1", "SPREAD", "training"),
         ("1xGPU=1", "PACK", "inference"), ("4xGPU=1", "STRICT_PACK", "inference")]


def _lines_with_runs(seed: int) -> tuple[object, list[object], PolicyConfig]:
    """`_random_cycle`'s cluster with longer lines of best-effort queues: mostly a gang of
    the kind before it, pending since mostly no earlier (a requeued one: earlier), now and
    then one pending since no known time; reclaim by what it trades, or not."""
    rng = random.Random(seed)
    snapshot, _, config = _random_cycle(seed)
    pending, kind, since = [], rng.choice(KINDS), 0.0
    for i in range(rng.randint(5, 40)):
        kind = kind if rng.random() < 0.7 else rng.choice(KINDS)
        since = max(0.0, since + rng.choice([0.0, 0.0, 300.0, 300.0, -900.0]))
        shape, strategy, priority = kind
        pending.append(gang(f"p-{i}", shape, strategy, priority=priority,
                            queue=rng.choice("aab"), seq=i,
                            since=None if rng.random() < 0.02 else since))
    own = rng.choice([None, 0, 2])  # team b's own line, over the policy's best effort
    b = config.queues[1].model_copy(update={"backfill_lookahead": own})
    trade = config.preemption.model_copy(
        update={"reclaim_trade_ratio": rng.choice([None, None, 0.5, 2.0])})
    return snapshot, pending, config.model_copy(
        update={"backfill": True, "queues": [config.queues[0], b], "preemption": trade})


def test_jumping_over_runs_decides_as_the_walk_gang_by_gang(monkeypatch):
    """Plans equal, every reason and who waits as whom included, with the jumps and with
    every run cut to one gang; the cases jump, and reach every action."""
    jumps, outcomes = [], set()
    run_end = Line.run_end

    def counted(line: Line, i: int) -> int:
        end = run_end(line, i)
        jumps.append(end - i - 1)
        return end

    for seed in range(300):
        snapshot, pending, config = _lines_with_runs(seed)
        monkeypatch.setattr(Line, "run_end", counted)
        plan = schedule(snapshot, pending, config, 4000.0)
        monkeypatch.setattr(Line, "run_end", lambda line, i: i + 1)
        assert plan == schedule(snapshot, pending, config, 4000.0), seed
        outcomes.update({p.action for p in plan.preemptions} | {bool(plan.admissions)})
    assert sum(jumps) > 1000 and outcomes >= {True, False, "reclaim", "preempt"}
    assert any("waiting as gang" in w.message for w in plan.waiting.values())


def test_setting_gangs_aside_behind_the_last_of_their_kind_tried_decides_as_trying_all(
        monkeypatch):
    """The premise of setting aside: a gang of the kind of one tried in vain that has
    waited no longer would fail alike (every gate on a gang's wait opens with the wait).
    The same admissions and stops when every gang is tried."""
    plans = [schedule(*_lines_with_runs(seed), 4000.0) for seed in range(300)]
    monkeypatch.setattr(walk_module, "_waited_no_longer", lambda gang, than: False)
    for seed, plan in enumerate(plans):
        tried = schedule(*_lines_with_runs(seed), 4000.0)
        assert (plan.admissions, plan.preemptions) == (tried.admissions, tried.preemptions), seed
    assert sum(len(p.admissions) for p in plans) > 300


def test_runs_break_at_a_new_kind_an_earlier_pending_since_or_an_unknown_one():
    a = [gang(f"a{i}", "2xGPU=1", since=s) for i, s in enumerate([5.0, 5.0, 7.0, 6.0])]
    b = gang("b", "2xGPU=1", "SPREAD", since=9.0)
    c = gang("c", "2xGPU=1", priority="inference", since=9.0)
    assert a[0].spec.shape is a[1].spec.shape  # equal shapes: one object (hashed.one_of)
    assert run_starts([*a, b, c, a[3]]) == [3, 4, 5, 6, 7]
    assert run_starts(a[:3]) == [3]
    unknown = gang("u", "2xGPU=1", since=None)
    assert run_starts([*a[:3], unknown]) == [1, 2, 3, 4]


def test_a_run_set_aside_whole_is_explained_when_asked_as_the_gang_it_waits_as():
    """A backlog's cycle keeps the runs its last pass set aside as groups (`plan.Behind`):
    each gang of one is found, says what the gang it waits as says, and is counted under
    its code; read in full, the reasons are those of the cycle that explains at once."""
    def line(queue: str, shape: str, n: int, seq: int) -> list[object]:
        return [gang(f"{queue}{i}", shape, "STRICT_PACK", queue=f"team-{queue}",
                     since=float(i), seq=seq + i) for i in range(n)]

    pending = line("a", "4xGPU=1", 30, 0) + line("b", "3xGPU=1", 20, 100)
    config = _teams().model_copy(update={"backfill": True})
    snapshot = busy(*TWO_NODES, placed=[running("r", "w-1: GPU=2"), running("s", "w-2: GPU=2")])
    plan = schedule(snapshot, Backlog.of(pending), config, 100.0)
    assert plan.admissions == () and len(plan.looked_at) == 2
    groups = list(plan.waiting.groups())
    assert [(q, len(g.line), g.blocker, g.code) for q, g in groups] == [
        ("team-a", 29, "a0", WaitCode.NO_FIT), ("team-b", 19, "b0", WaitCode.NO_FIT)]
    assert plan.waiting["a17"].message.startswith("waiting as gang a0 does")
    assert plan.waiting["b19"].behind == "b0" and "b20" not in plan.waiting
    assert len(plan.waiting) == 50 and plan == schedule(snapshot, pending, config, 100.0)


def _walked_lines(waiting: int) -> int:
    """Lines of `core.walk` run in a cycle over one best-effort line of `waiting` gangs of
    one kind that none fits now (and one that does, in another queue)."""
    pending = [gang(f"a{i}", "4xGPU=1", "STRICT_PACK", queue="team-a", since=float(i), seq=i)
               for i in range(waiting)] + [gang("b", "1xGPU=1", queue="team-b", seq=waiting)]
    config = _teams().model_copy(update={"backfill": True})
    walked = []

    def trace(frame, event, arg):
        if frame.f_code.co_filename.endswith("core/walk.py"):
            return lambda frame, event, arg: walked.append(event) if event == "line" else None
        return None

    backlog = Backlog.of(pending)
    sys.settrace(trace)
    try:
        plan = schedule(busy(*TWO_NODES, placed=[running("r", "w-1: GPU=2"),
                                                 running("s", "w-2: GPU=2")]), backlog,
                        config, 100.0)
    finally:
        sys.settrace(None)
    assert [a.gang_id for a in plan.admissions] == ["b"]
    return len(walked)


def test_a_best_effort_line_costs_its_runs_not_its_gangs():
    assert _walked_lines(2000) == _walked_lines(20)
