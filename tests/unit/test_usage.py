"""Time-based fair share (core.usage): the ledger's decay and window, the admission
penalty, KAI's share weights, the order it gives, and its config's errors."""

from __future__ import annotations

import dataclasses
import json
import math

import pytest
from pydantic import ValidationError

from raygang.core import PolicyConfig, QueueBook, QueueTree, schedule, water_fill
from raygang.core.backlog import Backlog
from raygang.core.cycle_dump import dump_cycle, load_cycle
from raygang.core.usage import (
    UsageLedger,
    UsagePolicy,
    UsageView,
    share_weights,
    time_share,
)
from tests.unit.builders import cluster, gang, queue, res

H = 3600.0
GPU8 = res("GPU=8")


def ledger(**policy: object) -> UsageLedger:
    return UsageLedger(UsagePolicy(enabled=True, **policy))


def used(book: UsageLedger, queue_name: str) -> float:
    return book.view().used.get(queue_name, {}).get("GPU", 0.0)


# The ledger -----------------------------------------------------------------------------
def test_without_a_half_life_usage_is_resource_seconds():
    book = ledger()
    book.advance(0.0, {"a": res("GPU=2")}, GPU8)
    book.advance(100.0, {"a": res("GPU=2"), "b": res("GPU=4")}, GPU8)
    book.advance(300.0, {}, GPU8)
    assert used(book, "a") == pytest.approx(2 * 300)
    assert used(book, "b") == pytest.approx(4 * 200)
    assert book.view().capacity["GPU"] == pytest.approx(8 * 300)
    assert book.view().fraction("a", "GPU") == pytest.approx(600 / 2400)


def test_a_half_life_halves_what_was_used_that_long_ago():
    book = ledger(half_life_s=H)
    book.advance(0.0, {"a": GPU8}, GPU8)
    book.advance(H, {}, GPU8)  # an hour of 8 GPUs, decaying as it is used
    exact = 8 * H / math.log(2) * (1 - 0.5)  # the integral of 8 x 0.5^((H - t) / H)
    assert used(book, "a") == pytest.approx(exact)
    book.advance(2 * H, {}, GPU8)
    assert used(book, "a") == pytest.approx(exact / 2)
    book.advance(3 * H, {}, GPU8)
    assert used(book, "a") == pytest.approx(exact / 4)


def test_the_decayed_integral_does_not_depend_on_how_often_the_loop_looks():
    once, often = ledger(half_life_s=H), ledger(half_life_s=H)
    for book, steps in ((once, [0.0, 5 * H]), (often, [i * 0.1 * H for i in range(51)])):
        for t in steps:
            book.advance(t, {"a": res("GPU=3")}, GPU8)
    assert used(once, "a") == pytest.approx(used(often, "a"))
    assert once.view().capacity["GPU"] == pytest.approx(often.view().capacity["GPU"])


def test_usage_leaves_the_sliding_window():
    week = 7 * 24 * H
    book = ledger(window_s=week)
    book.advance(0.0, {"a": GPU8}, GPU8)
    book.advance(10 * H, {"b": GPU8}, GPU8)  # a ran 10 h, then b
    book.advance(week, {"b": GPU8}, GPU8)
    assert used(book, "a") == pytest.approx(8 * 10 * H)
    # A week after a's last hour (plus one slice of the window), none of it counts.
    book.advance(week + 11 * H + book.policy.bucket_s, {"b": GPU8}, GPU8)
    assert used(book, "a") == pytest.approx(0.0, abs=1e-6)
    assert book.view().capacity["GPU"] == pytest.approx(used(book, "b"))
    assert used(book, "b") <= 8 * (week + book.policy.bucket_s) + 1e-6


def test_a_gap_longer_than_the_window_keeps_only_the_window():
    book = ledger(window_s=10 * H)
    book.advance(0.0, {"a": GPU8}, GPU8)
    book.advance(100 * H, {}, GPU8)
    # held all along: at most a window (and a slice) of it counts
    assert 8 * 10 * H - 1e-6 <= used(book, "a") <= 8 * (10 * H + book.policy.bucket_s) + 1e-6


def test_the_admission_penalty_is_charged_at_once():
    book = ledger(admission_penalty_s=300.0)
    book.advance(0.0, {}, GPU8)
    book.charge("a", res("GPU=4"), 300.0)
    assert used(book, "a") == pytest.approx(4 * 300)


def test_a_ledger_read_back_gives_the_same_view():
    book = ledger(half_life_s=2 * H, window_s=24 * H)
    for i in range(60):
        book.advance(i * 0.5 * H, {"a": res(f"GPU={i % 8}"), "b": res("GPU=1")}, GPU8)
    again = UsageLedger.load(book.policy, json.loads(json.dumps(book.data())))
    assert again.view().used["a"]["GPU"] == pytest.approx(book.view().used["a"]["GPU"])
    assert again.view().capacity["GPU"] == pytest.approx(book.view().capacity["GPU"])
    for b in (book, again):
        b.advance(31 * H, {}, GPU8)
    assert again.view().used["b"]["GPU"] == pytest.approx(book.view().used["b"]["GPU"])


def test_a_ledger_of_another_format_is_refused():
    with pytest.raises(ValueError, match="usage ledger format 9, expected 1"):
        UsageLedger.load(UsagePolicy(), {"format": 9})


# KAI's share weights ---------------------------------------------------------------------
@pytest.mark.parametrize("weights, usage, k, expected", [
    ([1, 1], [0.0, 0.0], 0.5, [0.75, 0.75]),  # nobody used anything: as the weights
    ([1, 1], [1.0, 0.0], 0.5, [0.25, 0.75]),  # w + k (w - u)
    ([1, 1], [1.0, 0.0], 0.0, [0.5, 0.5]),  # k = 0: usage changes nothing
    ([1, 3], [0.0, 0.0], 0.5, [0.375, 1.125]),
    ([1, 1], [1.0, 0.0], 2.0, [0.0, 1.5]),  # floored at 0
    ([1, 1], [5.0, 5.0], 1.0, [1, 1]),  # every one 0: the plain weights
])
def test_share_weights(weights, usage, k, expected):
    assert share_weights(weights, usage, k) == pytest.approx(expected)


def test_water_fill_divides_the_surplus_by_share_weights_and_keeps_quotas():
    items = [(4.0, 16.0, 1.0), (4.0, 16.0, 1.0)]  # quota 4 each, both want 16
    assert water_fill(16, items) == pytest.approx([8, 8])
    # The first used the whole pool over the window: it gets its quota and a quarter.
    assert water_fill(16, items, [1.0, 0.0], 0.5) == pytest.approx([4 + 2, 4 + 6])
    # Share weights are derived again each round over those still wanting more, as KAI
    # does: round 1 gives 0.5 / 0 / 0.5 of 16, the first saturates at 2; round 2 divides
    # the 14 left 0.25 / 0.75 between the other two.
    three = [(0.0, 2.0, 1.0), (0.0, 16.0, 1.0), (0.0, 16.0, 1.0)]
    assert water_fill(16, three, [0.0, 1.0, 0.0], 0.5) == pytest.approx([2, 3.5, 10.5])


def _book(view: UsageView | None, *specs, policy: UsagePolicy | None = None) -> QueueBook:
    tree = QueueTree(specs)
    policy = policy or UsagePolicy(enabled=True)
    return QueueBook(tree, (), time_share(policy, view, tree.paths))


def test_heavy_recent_usage_lowers_a_queues_fair_share_beyond_its_quota():
    view = UsageView({"a": {"GPU": 8 * H}}, {"GPU": 8 * H})  # a used the whole cluster
    for history, expected in ((None, (4, 4)), (view, (2, 6))):
        book = _book(history, queue("a"), queue("b"))
        book.compute_fair_shares(GPU8, {"a": GPU8, "b": GPU8})
        assert (book.fair["a"]["GPU"], book.fair["b"]["GPU"]) == pytest.approx(expected)
    with_quota = _book(view, queue("a", quota="GPU=4"), queue("b"))
    with_quota.compute_fair_shares(GPU8, {"a": GPU8, "b": GPU8})
    # The quota is untouched; the 4 GPUs beyond quotas go 1 : 3.
    assert (with_quota.fair["a"]["GPU"], with_quota.fair["b"]["GPU"]) == pytest.approx((5, 3))


def test_usage_is_off_unless_enabled_and_known():
    view = UsageView({"a": {"GPU": 8 * H}}, {"GPU": 8 * H})
    tree = QueueTree([queue("a")])
    assert time_share(UsagePolicy(), view, tree.paths) is None
    assert time_share(UsagePolicy(enabled=True), None, tree.paths) is None


def test_a_childs_usage_counts_against_its_siblings_pool():
    # org (quota 8 of 16) splits its share between x and y; x used all of org's share.
    view = UsageView({"x": {"GPU": 8 * H}, "z": {"GPU": 8 * H}}, {"GPU": 16 * H})
    book = _book(view, queue("org", quota="GPU=8"), queue("x", "org"), queue("y", "org"),
                 queue("z", quota="GPU=8"))
    book.compute_fair_shares(res("GPU=16"), {"x": GPU8, "y": GPU8, "z": GPU8})
    assert book.fair["org"]["GPU"] == pytest.approx(8)
    assert (book.fair["x"]["GPU"], book.fair["y"]["GPU"]) == pytest.approx((2, 6))


# The order it gives ----------------------------------------------------------------------
CONFIG = PolicyConfig(queues=(queue("a"), queue("b")), usage=UsagePolicy(enabled=True))


def _first_admitted(config: PolicyConfig, view: UsageView | None) -> str:
    snapshot = dataclasses.replace(cluster("w-1: GPU=8"), usage=view)
    pending = [gang("from-a", "8xGPU=1", queue="a", seq=0),
               gang("from-b", "8xGPU=1", queue="b", seq=1)]
    plan = schedule(snapshot, pending, config, 0.0)
    assert len(plan.admissions) == 1
    return plan.admissions[0].gang_id


def test_a_queue_with_heavy_recent_usage_yields_to_one_without():
    heavy_a = UsageView({"a": {"GPU": 8 * H}}, {"GPU": 8 * H})
    assert _first_admitted(CONFIG, None) == "from-a"  # a tie, broken by name
    assert _first_admitted(CONFIG, heavy_a) == "from-b"
    off = CONFIG.model_copy(update={"usage": UsagePolicy()})
    assert _first_admitted(off, heavy_a) == "from-a"
    unordered = CONFIG.model_copy(update={"usage": UsagePolicy(enabled=True,
                                                               order_by_usage=False)})
    assert _first_admitted(unordered, heavy_a) == "from-a"  # shares alone: both hold 0


def test_an_admission_is_charged_its_penalty_within_the_cycle_and_undone_with_it():
    # a and b hold nothing and used nothing: a tie (broken by name). An admission into a
    # charges it 10 h of its 2 GPUs at once: a now ranks after b; undone, a tie again.
    policy = UsagePolicy(enabled=True, admission_penalty_s=10 * H)
    book = _book(UsageView({}, {"GPU": 8 * H}), queue("a"), queue("b"), policy=policy)
    book.compute_fair_shares(GPU8, {"a": GPU8, "b": GPU8})
    assert book.level_key("a") == book.level_key("b") == (0.0, 0.0, 0.0)
    undo = book.charge("a", res("GPU=2"))
    assert book.level_key("a") > book.level_key("b")
    undo()
    assert book.level_key("a") == book.level_key("b")


def test_resource_weights_choose_what_usage_counts():
    view = UsageView({"a": {"GPU": 8 * H}, "b": {"CPU": 64 * H}},
                     {"GPU": 8 * H, "CPU": 64 * H})
    tree = QueueTree([queue("a"), queue("b")])
    for weights, heavier in (({"GPU": 1.0}, "a"), ({"CPU": 1.0}, "b")):
        history = time_share(UsagePolicy(enabled=True, resource_weights=weights), view,
                             tree.paths)
        assert history is not None
        fair = {"GPU": 4.0, "CPU": 32.0}
        ratios = {q: history.ratio(q, fair, res("GPU=8 CPU=64")) for q in "ab"}
        assert max(ratios, key=ratios.__getitem__) == heavier


def test_a_cycle_dump_keeps_the_usage_it_decided_with():
    heavy_a = UsageView({"a": {"GPU": 8 * H}}, {"GPU": 8 * H})
    snapshot = dataclasses.replace(cluster("w-1: GPU=8"), usage=heavy_a)
    pending = [gang("from-a", "8xGPU=1", queue="a", seq=0),
               gang("from-b", "8xGPU=1", queue="b", seq=1)]
    plan = schedule(snapshot, pending, CONFIG, 0.0)
    dump = load_cycle(json.dumps(dump_cycle(snapshot, Backlog.of(pending), CONFIG, 0.0,
                                            plan)))
    assert dump.cluster_snapshot().usage == heavy_a
    assert dump.difference(dump.replay()) is None


# Config ----------------------------------------------------------------------------------
@pytest.mark.parametrize("usage, message", [
    ({"k_value": -1}, "usage.k_value: Input should be greater than or equal to 0"),
    ({"window_s": 0}, "usage.window_s: Input should be greater than 0"),
    ({"half_life_s": -5}, "usage.half_life_s: Input should be greater than 0"),
    ({"admission_penalty_s": -1}, "usage.admission_penalty_s: Input should be greater"),
    ({"resource_weights": {"GPU": -1}}, "GPU: a resource weight is a number >= 0, got -1"),
    ({"resource_weights": {"GPU": 0}}, "every resource weight is 0: nothing would count"),
    ({"halflife": 60}, "usage.halflife: Extra inputs are not permitted"),
])
def test_a_bad_usage_config_says_what_is_wrong(usage, message):
    with pytest.raises(ValidationError) as error:
        PolicyConfig.model_validate({"usage": usage})
    text = "\n".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in error.value.errors())
    assert message in text


def test_usage_is_off_by_default_with_kais_and_kueues_defaults():
    usage = PolicyConfig().usage
    assert not usage.enabled
    assert usage.window_s == 7 * 24 * H and usage.half_life_s is None  # KAI's
    assert usage.k_value == 0.5 and usage.admission_penalty_s == 300.0
