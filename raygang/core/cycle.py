"""One scheduling cycle's state: the scratch capacity and queue usage the actions work on.

A cycle runs the configured actions in order (`core.actions`: allocate, reclaim, preempt),
each a pass over the pending gangs in fair-share order: the queue furthest below its fair
share goes next (hierarchically, ancestors first), and inside a queue the total order
(-priority, submission sequence, id). Every tentative move is made on a scratch copy of the
free capacity and the queues' usage. A gang that cannot be admitted is set aside and its
queue's line goes on (Kueue's BestEffortFIFO, the default), but on a bounded line
(`backfill_lookahead` set) only until `backfill_lookahead` + 1 gangs of it were (ones that
could fit on this cluster at all): the rest waits behind the first of them. With 0, the
first gang not admitted holds back its queue (strict FIFO per queue, like Kueue's
StrictFIFO); other queues go on.
"""

from __future__ import annotations

import functools
import itertools
import math
import time
from collections.abc import Callable, Mapping, Sequence
from operator import attrgetter
from typing import Any

from raygang.core.actions import ACTIONS
from raygang.core.actions.action import Action, VictimFilter
from raygang.core.backlog import Backlog, Line, Locator, demand
from raygang.core.capacity import Capacity
from raygang.core.clock import Clock
from raygang.core.config import PolicyConfig
from raygang.core.draining import Draining
from raygang.core.elastic import pieces, units_first
from raygang.core.preemption.excess import Amounts, ExcessSearch
from raygang.core.fairshare import QueueBook, QueueOrder
from raygang.core.memory import CycleMemory
from raygang.core.gang import PendingGang
from raygang.core.placement import EverFits, place
from raygang.core.plan import Growth, Plan, Positions, WaitCode, Waiting, Waitings
from raygang.core.preemption.pool import Candidates, Pool
from raygang.core.preemption.trade import Gate, Refusal
from raygang.core.reserve import Hold, elect, wide_gangs
from raygang.core.resources import Resources
from raygang.core.snapshot import ClusterSnapshot, PlacedGang
from raygang.core.reasons import Reasons
from raygang.core.statement import Statement
from raygang.core.usage import time_share
from raygang.core.walk import Aside, walk
from raygang.core import preemption
from raygang.core.preemption.victims import victim_key

class Cycle:
    """One cycle's scratch state, and what actions do with it: place a gang, search for
    victims, admit. `run` offers the pending gangs to each configured action in turn."""

    def __init__(self, snapshot: ClusterSnapshot, config: PolicyConfig, now: float,
                 actions: Mapping[str, Action] = ACTIONS, memory: CycleMemory | None = None):
        """`actions`: what `config.actions` names (a baseline's own variants); `memory`:
        what the scheduler keeps between cycles (`core.memory`; none: nobody's)."""
        self.snapshot = snapshot
        self.actions = actions
        self.config = config
        self.now = now
        self.tree = config.queue_tree
        self.memory = memory = CycleMemory() if memory is None else memory
        self.capacity = Capacity(snapshot.alive_nodes, memory=memory)
        self.draining = Draining(self.capacity)  # what this cycle's victims free
        # Gangs already on their way out (preempted in an earlier cycle and in their grace
        # period, or ended and being torn down) free their capacity shortly: a gang may
        # take it and wait for them, as for this cycle's victims, rather than stop others
        # for room that is about to be free (a real cluster's teardown takes a moment).
        # Elastic gangs are read as their minimum plus one unit per surplus member
        # (elastic.py); members being removed are leaving capacity like draining gangs.
        self.pieces, leaving_units = pieces(snapshot.placed)
        self.surplus_queues: dict[str, int] = {}
        self._units_of: dict[str, list[PlacedGang]] = {}  # gang id -> its surplus units
        for unit in self.pieces:
            if unit.of is not None:
                self.surplus_queues[unit.queue] = self.surplus_queues.get(unit.queue, 0) + 1
                self._units_of.setdefault(unit.of, []).append(unit)
        leaving = [g for g in snapshot.placed if g.draining]
        if leaving_units:  # those of a gang leaving whole are counted with it
            whole = {g.gang_id for g in leaving}
            leaving += [u for u in leaving_units if u.of not in whole]
        if leaving:
            self.capacity.release(bundle for g in leaving for bundle in g.bundles)
            self.draining.add(leaving)
        self.ever = EverFits(snapshot, memory)
        self.book = QueueBook(self.tree, snapshot.placed,
                              time_share(config.usage, snapshot.usage, self.tree.paths),
                              memory)
        # Every move of the cycle goes through its statement (core.statement); these name
        # its parts, as actions and reasons read them.
        st = self.statement = Statement(self.capacity, self.book, self.draining)
        self.admissions, self.preemptions, self.admitted = st.admissions, st.preemptions, \
            st.admitted
        self.taken, self.taken_from, self.failed = st.taken, st.taken_from, st.failed
        st.on_stop.append(self._stopped)
        # gang id -> (action, candidates) that failed it
        self.tried: dict[str, list[tuple[str, Candidates]]] = {}
        self.limited: dict[str, str] = {}  # gang id -> the limit it hit last
        self.memo: dict[str, object] = {}  # what an action works out once per cycle
        self.waiting: dict[str, Waiting] = {}
        self.aside = Aside()  # gang id -> the gang of its kind it was set aside behind
        # gangs a pass went past (beyond a lookahead, for the declared short): they wait
        # behind their queue's blocked gang (`core.reasons`)
        self.passed_over: set[str] = set()
        self._pools: dict[str, Pool] = {}  # action -> the gangs it may stop
        self._refused = st.refused  # (search key, gate name) -> a gate's refusal
        # gang id -> (action, the refusal) of a gate that lifts at a time (its reason says)
        self.gated: dict[str, tuple[str, Refusal]] = {}
        self._stoppable: list[PlacedGang] | None = None
        self._lowest: float | None = None  # the lowest priority of `_stoppable`
        self._empty_pool: Pool | None = None
        self._sorted: dict[str, list[PlacedGang]] = {}  # victim order -> stoppable, sorted
        self._good: dict[str, dict[Resources, int]] = {}  # queue -> totals it admits
        # gang id -> the capacity held for it: pending too long (`sla_waiting_time_s`)
        self.holds: dict[str, Hold] = {}
        self.clock = Clock(config, actions, now)  # delays and minimum runtimes
        self.delayed = self.clock.delayed  # gang id -> (action, its delay, seconds left)
        # Actions see the clock's two calls as the cycle's (`actions.action.CycleState`):
        # the clock imports the actions, so they may not import it (the core's layers).
        self.delay_left, self.delay = self.clock.delay_left, self.clock.delay
        self.growths: list[Growth] = []  # by the grow action
        self.grow_waits: dict[str, str] = {}  # elastic gang id -> why it grows no further
        self.backlog: Backlog | None = None

    # The cycle ----------------------------------------------------------------------------
    def run(self, backlog: Backlog, eager: bool = False) -> Plan:
        """The plan for `backlog`; `eager`: explain every waiting gang now (the plain
        algorithm, as `schedule` runs it on a list of gangs)."""
        self.backlog = backlog
        lines = self._lines(backlog)
        self.left = {queue: self._line(backlog, queue, line)
                     for queue, line in lines.items() if line}
        # queue -> gangs of its line that declare a max_runtime_s, less those admitted
        self.declared = {q: n for q, n in backlog.declared.items() if n and q in self.left}
        self.book.share_out_demand(self.snapshot.alive_nodes, {
            queue: demand(self._good_totals(queue, backlog.totals.get(queue, {})))
            for queue in lines})
        self.holds = self._elect()
        timings: dict[str, float] = {}
        passed = False  # (an idle pass is skipped only after one that looked at the lines)
        for name in self.config.actions:
            action = self.actions[name]
            began = time.perf_counter()
            if action.attempt is not None and not (passed and action.idle and action.idle(self)):
                walk(self, functools.partial(action.attempt, self))
                passed = True
            if action.finish is not None:  # a pass over the running gangs (grow)
                action.finish(self)
            timings[name] = time.perf_counter() - began

        locate = Locator(lines, backlog.find)
        explain = functools.partial(Reasons(self).explain, eager)  # on the cycle as it ends
        return Plan(
            admissions=tuple(self.admissions),
            waiting=Waitings(self.waiting, explain(), locate) if eager
            else Waitings(self.waiting, ({}, {}), locate, later=explain),
            at=self.now,
            preemptions=tuple(self.preemptions),
            positions=Positions(lines, locate),
            growths=tuple(self.growths),
            grow_waits=self.grow_waits,
            timings=timings,
            steady_until=self.clock.steady_until,
        )

    def _lines(self, backlog: Backlog) -> dict[str, Sequence[PendingGang]]:
        """Each queue's line, less the gangs that can never be admitted through it (a
        queue gone from the config or no leaf any more, a limit below the gang's size):
        they wait with the reason, and block nobody. Checked per distinct total."""
        lines: dict[str, Sequence[PendingGang]] = {}
        for queue, line in backlog.lines.items():
            totals = backlog.totals.get(queue, {})
            good = self._good_totals(queue, totals)
            if len(good) == len(totals):
                lines[queue] = line  # read in place
                continue
            kept = []
            for gang in line:
                problem = self.tree.problem(gang.spec)
                if problem:
                    self.waiting[gang.gang_id] = Waiting(gang.gang_id, WaitCode.UNSCHEDULABLE,
                                                         problem)
                else:
                    kept.append(gang)
            lines[queue] = kept
        return lines

    @staticmethod
    def _line(backlog: Backlog, queue: str, line: Sequence[PendingGang]) -> Line:
        """A line to walk; its runs as known from an earlier cycle where it is read in
        place (a line less the gangs it can never admit has runs of its own)."""
        if line is not backlog.lines[queue]:
            return Line(line)
        return Line(line, backlog.runs.get(queue), functools.partial(backlog.keep_runs, queue))

    def _good_totals(self, queue: str, totals: Mapping[Resources, int]
                     ) -> dict[Resources, int]:
        """The totals of a queue's gangs that its place in the tree admits at all."""
        good = self._good.get(queue)
        if good is None:
            good = self._good[queue] = {
                total: n for total, n in totals.items()
                if self.tree.problem_of(queue, total) is None}
        return good

    def short_runtime(self, queue: str) -> float:
        """The longest declared run of a gang that `queue`'s line lets past its lookahead
        (the queue's own setting, else the policy's); 0: none."""
        own = self._own(queue, "backfill_max_runtime_s")
        return float(self.config.backfill_max_runtime_s if own is None else own)

    def lookahead(self, queue: str) -> int | None:
        """How many more gangs of `queue`'s line a pass may set aside past its first: the
        queue's own `backfill_lookahead`, else none with the policy's `backfill` (None: no
        bound), else the policy's `backfill_lookahead`. A queue's own setting wins, as a
        ClusterQueue's queueing strategy does in Kueue."""
        own: int | None = self._own(queue, "backfill_lookahead")
        if own is not None:
            return own
        return None if self.config.backfill else self.config.backfill_lookahead

    def _own(self, queue: str, name: str) -> Any:
        """A queue's own setting of its line (`QueueSpec`); None: it has none."""
        spec = self.tree.specs.get(queue)
        return None if spec is None else getattr(spec, name)

    def _elect(self) -> dict[str, Hold]:
        """The holds for the queue heads pending longest beyond `sla_waiting_time_s`, at
        most `sla_max_holds`, by gang id (in the order they were held)."""
        sla = self.config.sla_waiting_time_s
        holds: dict[str, Hold] = {}
        if sla is None:
            return holds
        fits, heads = self.ever.fits, []
        wide = wide_gangs(self.config.sla_min_nodes, self.snapshot.alive_nodes)
        totals = self.backlog.totals if self.backlog is not None else {}
        for queue, line in self.left.items():
            if wide is not None and not any(map(wide, totals.get(queue, ()))):
                continue  # no gang of the line is that wide
            for head in line:  # the first that fits the cluster at all (most lines: the
                # first), of those wide enough
                if (wide is None or wide(head.total)) and fits(head):
                    heads.append(head)
                    break
        self.clock.sla_heads(heads, sla)
        elected = elect(heads, self.now, sla, lambda g: self.book.admission_problem(g) is None)
        for gang in itertools.islice(elected, self.config.sla_max_holds):
            # each on what the holds before it left free (theirs is reserved)
            if (hold := Hold.of(gang, self.capacity, self.draining.settled)) is not None:
                holds[gang.gang_id] = hold
        return holds

    def held_attempt(self, hold: Hold, attempt: Callable[[PendingGang], bool]) -> bool:
        """Offer an elected gang what is held for it too (what the other holds keep stays
        theirs). Shapes that failed without the hold fail with it; pools are rebuilt, as
        their bounds assumed less free."""
        if not hold.holds_any:  # nothing free there yet: the capacity is as it was
            admitted = attempt(hold.gang)
            if admitted:
                del self.holds[hold.gang.gang_id]
            return admitted
        mark = self.statement.checkpoint()
        self.statement.unhold(hold)
        self._pools.clear()
        if attempt(hold.gang):
            self.statement.commit(mark)
            del self.holds[hold.gang.gang_id]
            return True
        # Held again. A failed attempt stopped nobody (victims are stopped with the gang
        # they make room for), so no pool's taken gangs change back. Pools it built stay:
        # their bounds counted the hold as free, an over-estimate, which only prunes less
        # (a search checks the capacity itself).
        self.statement.rollback(mark)
        return False

    # What actions use ---------------------------------------------------------------------
    def queue_order(self, queues: Sequence[str]) -> QueueOrder:
        """The queues in fair-share order, as a pass takes them (grow)."""
        return QueueOrder(self.book, queues)

    def place(self, gang: PendingGang) -> tuple[str, ...] | None:
        """Nodes for the gang on the free capacity now, or None."""
        return place(gang.bundles, gang.strategy, self.capacity, gang.layout)

    def pool(self, action: str, narrow: VictimFilter | None = None,
             key: str | None = None, young: bool = False) -> Pool:
        """Running gangs that `action` may stop, in its victim order, least important first
        (once per cycle, per `key`: the action's name unless given): preemptible, not
        draining, not protected by a minimum runtime (their class's, or the action's own:
        `PolicyConfig.preemption`, unless `young`: a search whose victims a trade must
        justify, `core.preemption.trade`), and those its victim filter keeps of them
        (`narrow`'s, if given)."""
        rules = self.actions[action]
        key = key or action
        if key not in self._pools:
            order = rules.order(self.config.preemption)
            if order not in self._sorted:  # sorted once per order
                self._sorted[order] = sorted(  # surplus members before any whole gang
                    self.stoppable(),
                    key=units_first(victim_key(order, self.now), lasting=order == "newest"))
            stoppable = self._sorted[order]
            narrow = narrow or rules.victim_filter
            ordered = stoppable if narrow is None else narrow(self, stoppable)
            ordered, kept = (ordered, []) if young else self.clock.old_enough(ordered, action)
            self._pools[key] = Pool(ordered, self.capacity, self.taken, kept)
        return self._pools[key]

    def stoppable(self) -> list[PlacedGang]:
        """The running gangs some action may stop (filtered once: an action's pool is a
        subset): preemptible, not draining, not protected by their class's minimum
        runtime."""
        if self._stoppable is None:
            self._stoppable = self.clock.stoppable(self.pieces)
        return self._stoppable

    def lowest_priority(self) -> float:
        """The lowest priority of the gangs some action may stop (inf: none), once a
        cycle: a gang at or below it has nobody to preempt (`core.actions.preempt`)."""
        if self._lowest is None:
            self._lowest = min(map(attrgetter("priority"), self.stoppable()), default=math.inf)
        return self._lowest

    def empty_pool(self) -> Pool:
        """A pool of nobody (once a cycle): a search in it only places the gang."""
        if self._empty_pool is None:
            self._empty_pool = Pool([], self.capacity, self.taken)
        return self._empty_pool

    def search(self, gang: PendingGang, pool: Pool, candidates: Candidates, action: str,
               amounts: Amounts | None = None, gates: Sequence[Gate] = ()) -> bool:
        """Admit `gang` by stopping some of `candidates` (whole gangs, as few and as
        unimportant as it takes), if that makes room; else remember it tried. With
        `amounts` (reclaim), no more than those per queue: where the victims found take
        more, or none were found, the search by amount looks among the amounts' own
        candidates (core.preemption.excess). The victims found must pass the action's
        gates (`Action.gates`) and `gates` (core.preemption.trade `Gate`)."""
        rules = self.actions[action].gates
        if rules:  # (most searches have no gate: they pay for none)
            gates = [*(g for rule in rules if (g := rule(self, gang)) is not None), *gates]
        second = any(g.instead_of_delay for g in gates) if gates else False
        if self.held_back(gang, action, delay=not second):
            return False
        key: tuple[object, ...] = (action, gang.shape, gang.priority, gang.queue,
                                   gang.preemptible)
        if gates:
            key += tuple(g.name for g in gates)
            for gate in gates:  # what a gang of its kind was refused, it is too
                refused = self._refused.get((key, gate.name))
                if refused is not None and gate.again(refused):
                    return self._refused_by(gang, action, refused)
        found, search = None, None
        if key not in self.failed:
            search = preemption.VictimSearch(gang, self.capacity, self.book, pool)
            found = search.run(candidates)
            if amounts is not None:
                if found is not None and not amounts.allow(found[1]):
                    search.undo()
                    found = None
                if found is None:
                    wide, among = amounts.candidates()
                    search = ExcessSearch(gang, self.capacity, self.book, wide, amounts)
                    found = search.run(among)
        if found is None:
            self.failed.add(key)
            self.clock.searched(self.actions[action])
            if not second:  # (a second try, past the delay, says nothing)
                self.tried.setdefault(gang.gang_id, []).append((action, candidates))
            return False
        nodes, victims = found
        for gate in gates:
            refused = gate.refuse(victims)
            if refused is not None:
                assert search is not None
                search.undo()
                self._refused[key, gate.name] = refused
                if refused.until is not None:  # others may be ready before
                    self.clock.changes_at(refused.until)
                    self.clock.searched(self.actions[action])
                else:  # a trade: its sides grow with the clock
                    self.clock.changes_at(self.now)
                return self._refused_by(gang, action, refused)
        why = self.actions[action].why
        assert why is not None, f"action {action} stops gangs but says no why"
        self.statement.stop(gang, victims, action, why, self._units_of)
        self.admit(gang, nodes, action if victims else "allocate", victims)
        return True

    def _refused_by(self, gang: PendingGang, action: str, refused: Refusal) -> bool:
        if refused.until is not None:
            self.gated[gang.gang_id] = (action, refused)
        return False

    def held_back(self, gang: PendingGang, action: str, delay: bool = True) -> bool:
        """Whether `gang` may stop nobody for `action` now, whoever runs (and its reason
        says why): a borrow cap, or (with `delay`) the action's delay. An action may
        ask before it builds its pool: in a busy cluster the gangs reclaim would search
        for are often all in their delay, and its pool costs every stoppable gang sorted
        and each queue's share walked; a pool is read only by searches, so when it is
        built changes nothing (`search` asks again, alike)."""
        problem = None if gang.preemptible else self.book.borrow_problem(gang.queue, gang.total)
        if problem:  # stopping others (always preemptible gangs) never changes this
            self.limited[gang.gang_id] = problem
            return True
        left = self.delay_left(gang, action) if delay else 0.0
        if left > 0:
            self.delay(gang, action, left)
            return True  # KAI's preemptionDelay: what frees meanwhile may do
        return False

    def _stopped(self, victim: PlacedGang) -> None:
        for pool in self._pools.values():
            pool.taken(victim)

    def young(self, action: str) -> list[tuple[PlacedGang, float]]:
        """The gangs `action`'s minimum runtime kept from its pool, with when they may go."""
        pool = self._pools.get(action)
        return pool.young if pool else []

    def frees(self, victim: PlacedGang) -> Resources:
        """What stopping `victim` takes from its queue: a gang stopped whole loses what
        is left of its surplus too."""
        units = self._units_of.get(victim.gang_id) if victim.of is None else None
        if not units:
            return victim.total
        return Resources.sum([victim.total] + [u.total for u in units
                                               if u.gang_id not in self.taken])

    def admit(
        self, gang: PendingGang, nodes: tuple[str, ...], action: str, victims: list[PlacedGang]
    ) -> None:
        self.statement.admit(gang, nodes, action, victims)
        self.limited.pop(gang.gang_id, None)
