"""Each policy's documented rule, checked on a tiny hand-made trace (times in seconds)."""

from __future__ import annotations

import pytest

from tests.sim.builders import job, replay_of, run, trace

# raygang reclaiming at once (no minimum runtime, no delay): the rules of whom it takes.
AT_ONCE = {"preemption": {"reclaim_min_runtime_s": 0, "reclaim_delay_s": 0}}


def test_fifo_runs_jobs_in_submission_order_and_a_blocked_head_holds_back_the_rest():
    t = trace(job("a", 0, 100), job("b", 1, 100), job("c", 2, 10, gpus=1))
    assert run(t, "fifo") == {"a": (0, 100, 0), "b": (100, 200, 0), "c": (200, 210, 0)}


def test_a_job_with_its_own_measured_start_starts_at_that_pace_the_others_at_the_mean():
    measured = job("a", 0, 100, gpus=4).model_copy(update={"start_s": 7.0})
    result = replay_of(trace(measured, job("b", 0, 100, gpus=4)), "raygang", start_s=2.0)
    logs = {log.job.name: log for log in result.jobs.values()}
    assert {name: log.first_start - log.first_admitted for name, log in logs.items()} == \
        {"a": 7.0, "b": 2.0}
    assert logs["a"].finished_at == 107.0  # the start, then its work


def test_sjf_runs_the_shortest_pending_job_first_and_backfills():
    t = trace(job("a", 0, 100), job("b", 1, 50), job("c", 2, 10))
    assert run(t, "sjf") == {"a": (0, 100, 0), "c": (100, 110, 0), "b": (110, 160, 0)}


def test_a_static_partition_never_lends_a_tenants_nodes():
    t = trace(job("a", 0, 100, queue="t1"), job("b", 0, 100, queue="t1"),
              quotas={"t1": 8, "t2": 8})
    assert run(t, "static", nodes=2)["b"] == (100, 200, 0)  # t2's node stays idle
    assert run(t, "raygang", nodes=2)["b"] == (0, 100, 0)  # borrowed


def test_a_job_larger_than_its_partition_or_the_cluster_is_skipped_with_the_reason():
    t = trace(job("big", 0, 10, gpus=16, queue="t1"), job("ok", 0, 10, queue="t1"),
              quotas={"t1": 8, "t2": 8})
    static = replay_of(t, "static", nodes=2)
    assert "can never be admitted" in static.jobs["j000000"].skipped
    assert static.jobs["j000001"].finished_at == 10
    assert replay_of(t, "raygang", nodes=2).jobs["j000000"].finished_at == 10
    assert "even with the cluster empty" in replay_of(t, "fifo", nodes=1).jobs["j000000"].skipped


def test_raygang_reclaims_borrowed_nodes_and_the_victim_loses_the_work_since_its_checkpoint():
    # t1 borrows t2's node for b; t2's job comes at 25 min: b is reclaimed, stopped after
    # its 30 s grace period, and loses what it ran since its last 10-minute checkpoint.
    t = trace(job("a", 0, 3600, queue="t1"), job("b", 0, 3600, queue="t1"),
              job("c", 1500, 100, queue="t2"), quotas={"t1": 8, "t2": 8})
    result = replay_of(t, "raygang", nodes=2, checkpoint_s=600, preemption_grace_s=30,
                       config=AT_ONCE)
    by_name = {log.job.name: log for log in result.jobs.values()}
    c, b = by_name["c"], by_name["b"]
    assert (c.first_start, c.finished_at) == (1530, 1630)
    (stop,) = b.stops
    assert (stop.at, stop.ran_s, stop.lost_s, stop.action, stop.for_gpus) == (
        1530, 1530, 330, "reclaim", 8)
    # Back when c ends, with 3600 - 1200 s of work left.
    assert b.finished_at == 1630 + 2400
    assert by_name["a"].stops == [] and by_name["a"].finished_at == 3600


def test_raygang_reclaims_after_its_delay_and_takes_the_victim_that_saved_last():
    # The fixed rule: c may reclaim once pending reclaim_delay_s (300 s), so from 1800 s;
    # of t1's two 8-GPU jobs, b (checkpoints every 600 s from 0 s) and d (from 400 s),
    # the one with the least work since its last checkpoint goes: b, 0-60 s after its
    # checkpoint at 1800 s, where d has 200 s unsaved.
    t = trace(job("b", 0, 7200, queue="t1"), job("d", 400, 7200, queue="t1"),
              job("c", 1500, 100, queue="t2"), quotas={"t1": 8, "t2": 8})
    fixed = {"preemption": {"reclaim_trade_ratio": None}}
    result = replay_of(t, "raygang", nodes=2, config=fixed, checkpoint_s=600,
                       preemption_grace_s=30)
    by_name = {log.job.name: log for log in result.jobs.values()}
    assert 1800 + 30 <= by_name["c"].first_start <= 1800 + 60 + 30  # a resync notices
    (stop,) = by_name["b"].stops
    assert stop.action == "reclaim" and stop.lost_s <= 90
    assert by_name["d"].stops == []
    # The default trades: once d has saved at 1600 s, its few unsaved seconds are worth
    # less than c's wait (8 GPUs below its quota), so c need not wait out the delay.
    result = replay_of(t, "raygang", nodes=2, checkpoint_s=600, preemption_grace_s=30)
    by_name = {log.job.name: log for log in result.jobs.values()}
    assert 1600 < by_name["c"].first_start < 1800
    (stop,) = by_name["d"].stops
    assert stop.action == "reclaim" and stop.lost_s <= 60
    assert by_name["b"].stops == []


def test_kueue_admits_past_a_head_that_does_not_fit_best_effort_fifo():
    t = trace(job("a", 0, 100), job("wide", 1, 100, gpus=16), job("c", 2, 50))
    kueue = run(t, "kueue", nodes=2)
    assert kueue["c"] == (2, 52, 0)  # BestEffortFIFO: c passes the blocked 16-GPU gang
    assert kueue["wide"] == (100, 200, 0)
    # raygang's default line is best-effort likewise; with backfill_lookahead 0, strict
    # FIFO in its queue: c waits for the wide gang
    assert run(t, "raygang", nodes=2)["c"] == (2, 52, 0)
    strict = {"backfill_lookahead": 0}
    assert run(t, "raygang", nodes=2, config=strict)["c"] == (200, 250, 0)


def test_kueue_reclaims_from_a_borrowing_queue_the_most_recently_admitted_first():
    t = trace(job("a", 0, 3600, queue="t1"), job("b", 10, 3600, queue="t1"),
              job("c", 1500, 100, queue="t2"), quotas={"t1": 8, "t2": 8})
    result = replay_of(t, "kueue", nodes=2, checkpoint_s=600, preemption_grace_s=0)
    by_name = {log.job.name: log for log in result.jobs.values()}
    assert [s.action for s in by_name["b"].stops] == ["reclaim"]
    assert by_name["a"].stops == []
    assert by_name["c"].first_start == 1500


@pytest.mark.parametrize("policy_name", ["raygang", "fifo", "static", "sjf", "kueue", "kai",
                                         "kai-tbf", "raygang-tbf", "raygang-no-tbf"])
def test_every_policy_completes_every_job_that_fits(policy_name):
    t = trace(*(job(f"j{i}", i * 7, 50 + 13 * i, gpus=(1, 2, 4, 8, 16)[i % 5],
                    queue=("t1", "t2")[i % 2]) for i in range(20)),
              quotas={"t1": 16, "t2": 16})
    result = replay_of(t, policy_name, nodes=4)
    assert all(log.finished_at is not None and log.remaining_s == 0
               for log in result.jobs.values())


def test_kai_reclaims_beyond_quota_where_raygang_protects_the_fair_share():
    # t1 runs a (8), b (8), d (4) on three 8-GPU nodes, t2 runs c (4); t3 is idle. At
    # 100 s t2 asks for e (4, within its quota) and f (8): t1's fair share is then 12
    # (quotas 8 + 8, the 8 left split between t1 and t2). raygang protects what t1 runs
    # within quota or fair share — a, then d (12) — and reclaims b; KAI protects only
    # the quota and takes the most recently started gang beyond it: d.
    t = trace(job("a", 0, 3600, queue="t1"), job("b", 1, 3600, queue="t1"),
              job("d", 2, 3600, gpus=4, queue="t1"), job("c", 3, 3600, gpus=4, queue="t2"),
              job("e", 100, 100, gpus=4, queue="t2", priority=200),
              job("f", 100, 100, gpus=8, queue="t2", priority=100),
              quotas={"t1": 8, "t2": 8, "t3": 8})

    def stopped(policy_name):
        result = replay_of(t, policy_name, nodes=3, config=AT_ONCE)
        return sorted(log.job.name for log in result.jobs.values()
                      if any(s.action == "reclaim" and s.at < 200 for s in log.stops))

    assert stopped("raygang") == ["b"]
    assert stopped("kai") == ["d"]


def test_kai_time_based_fair_share_gives_less_over_quota_to_the_queue_that_used_more():
    # One 8-GPU node, two queues with no quota and equal weights. t1 runs one 8-GPU job for
    # 10 h; then each queue has eight 1-GPU jobs waiting. Without history the over-quota
    # share is 4 + 4; with KAI's time-based fair share (kValue 0.5), t1, which used the
    # whole cluster for the window so far (u = 1), gets a weight 0.5 + 0.5 (0.5 - 1) = 0.25
    # against t2's 0.5 + 0.5 (0.5 - 0) = 0.75: 2 GPUs against 6.
    ten_h = 10 * 3600
    jobs = [job("hog", 0, ten_h, gpus=8, queue="t1")]
    jobs += [job(f"a{i}", 60 + i, 3600, gpus=1, queue="t1") for i in range(8)]
    jobs += [job(f"b{i}", 120 + i, 3600, gpus=1, queue="t2") for i in range(8)]
    t = trace(*jobs, quotas={"t1": 0, "t2": 0})

    def first_wave(policy_name):
        starts = run(t, policy_name, nodes=1)
        return sorted(name[0] for name, (start, _, _) in starts.items()
                      if name != "hog" and start < ten_h + 1800)

    assert first_wave("kai") == ["a"] * 4 + ["b"] * 4
    assert first_wave("kai-tbf") == ["a"] * 2 + ["b"] * 6


def test_kai_usage_history_slides_and_decays():
    """kai-tbf's usage is the product's ledger (core.usage) configured as KAI's: a queue's
    GPU-seconds over the window, decayed by the half-life if any, over the cluster's."""
    from raygang.core.usage import UsageLedger, UsagePolicy
    from raygang.sim.baselines.kai import USAGE
    from tests.unit.builders import res

    def usage_after(hours, **policy):
        ledger = UsageLedger(UsagePolicy(**{**USAGE, **policy}))
        for h in range(hours + 1):
            ledger.advance(h * 3600.0, {"t1": res("GPU=4")}, res("GPU=8"))
        return ledger.view().fraction("t1", "GPU")

    assert usage_after(5) == 0.5  # 4 of 8 GPUs all along
    assert usage_after(10, window_s=2 * 3600) == 0.5
    decayed = UsageLedger(UsagePolicy(**{**USAGE, "half_life_s": 3600}))
    decayed.advance(0.0, {"t1": res("GPU=8")}, res("GPU=8"))
    decayed.advance(3600.0, {}, res("GPU=8"))  # one hour at 8 of 8
    decayed.advance(7200.0, {}, res("GPU=8"))  # one hour at 0 of 8: the first counts half
    assert abs(decayed.view().fraction("t1", "GPU") - 0.5 / 1.5) < 1e-9


def test_an_elastic_job_starts_at_its_minimum_grows_and_its_work_follows_its_size():
    # Two 8-GPU nodes. "hold" (8 GPUs, 1 h) takes one node; "e" (16 GPUs: 2 members,
    # elastic from half) starts at once on the other at 1 member, so at half speed; when
    # "hold" ends at 3600 s it grows to 2. Its 7200 s of work: 1800 s done by then (half
    # speed), 5400 s left at full speed: it ends at 9000 s. Rigid, it waits for "hold"
    # and ends at 3600 + 7200 = 10800 s.
    t = trace(job("hold", 0, 3600, gpus=8, queue="t1"), job("e", 1, 7200, gpus=16, queue="t1"),
              quotas={"t1": 16})
    elastic = run(t, "raygang", nodes=2, elastic_min=0.5)
    rigid = run(t, "raygang", nodes=2)
    assert elastic["e"][0] == 1 and abs(elastic["e"][1] - 9000) < 1
    assert rigid["e"][0] == 3600 and rigid["e"][1] == 10800


def test_an_elastic_job_that_restarts_to_resize_redoes_the_work_since_its_checkpoint():
    # As above, with `resize: restart` (Ray Train V2's way) and a checkpoint every 1000 s
    # of running: at 3600 s it has done 1799.5 s of work (half speed since 1 s), but saved
    # only 1500 (its checkpoint at 3001 s); it then starts again for 600 s, and does the
    # 5700 s left at full speed: it ends at 3600 + 600 + 5700 = 9900 s (live: 9000 s).
    t = trace(job("hold", 0, 3600, gpus=8, queue="t1"), job("e", 1, 7200, gpus=16, queue="t1"),
              quotas={"t1": 16})
    result = replay_of(t, "raygang", nodes=2, elastic_min=0.5, elastic_resize="restart",
                       elastic_restart_s=600, checkpoint_s=1000, preemption_grace_s=0)
    e = next(log for log in result.jobs.values() if log.job.name == "e")
    assert e.first_start == 1 and abs(e.finished_at - 9900) < 1
    assert e.resize_restarts == 1 and e.stops == [] and e.attempts == 1
    assert abs(e.resize_lost_gpu_s - (299.5 * 16 + 600 * 16)) < 16


def test_a_job_shrunk_by_a_restart_frees_its_surplus_before_it_starts_again():
    # "e" (16 GPUs, elastic from half, `resize: restart`, 300 s to restart) runs on both
    # nodes; at 3600 s "b" reclaims 8 GPUs: e stops, gives its surplus node back and
    # starts again at 1 member. b starts at once, not after e's restart.
    t = trace(job("e", 0, 36000, gpus=16, queue="t1"), job("b", 3600, 3600, gpus=8, queue="t2"),
              quotas={"t1": 8, "t2": 8})
    result = replay_of(t, "raygang", nodes=2, elastic_min=0.5, preemption_grace_s=0,
                       config=AT_ONCE, elastic_resize="restart", elastic_restart_s=300)
    by_name = {log.job.name: log for log in result.jobs.values()}
    assert by_name["b"].first_start == 3600 and by_name["e"].stops == []
    # Admitted at its minimum, it grows at once (a restart at 0 s: admission does not
    # take the surplus that fits, docs/simulator.md "Elastic jobs"), is shrunk for b, grows back.
    assert by_name["e"].resize_restarts == 3


def test_an_elastic_job_shrinks_before_anyone_is_stopped_whole_and_loses_no_work():
    # "e" (16 GPUs, elastic from half) runs at full size on both nodes; at 3600 s a job of
    # another queue under its quota reclaims 8 GPUs: e loses its surplus member (after
    # the grace period), not its work, and is never requeued.
    t = trace(job("e", 0, 36000, gpus=16, queue="t1"), job("b", 3600, 3600, gpus=8, queue="t2"),
              quotas={"t1": 8, "t2": 8})
    result = replay_of(t, "raygang", nodes=2, elastic_min=0.5, preemption_grace_s=0,
                       config=AT_ONCE)
    by_name = {log.job.name: log for log in result.jobs.values()}
    assert by_name["e"].stops == [] and by_name["e"].attempts == 1
    assert by_name["b"].first_start < 3700
    # Full speed 0-3600 s (3600 done), half while b runs (3600 s -> 1800 done), full after:
    # 36000 - 5400 = 30600 s left from 7200 s.
    assert abs(by_name["e"].finished_at - (7200 + 30600)) < 120
