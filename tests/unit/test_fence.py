"""The member fence's rules (runtime/member/fence.py) with the GCS call replaced: a member
ends on the answer "dead"; with a lease, once nothing has answered for (a little less
than) the lease, never sooner; without one, no answer is no decision."""

from __future__ import annotations

import time

import pytest

from raygang.runtime.member import fence


class Ended(BaseException):  # what `_end` raises here instead of ending the process
    pass


class Enough(BaseException):  # the test has seen enough calls (the watch loops forever)
    pass


def watch(monkeypatch, answers, lease_s):
    """Run the watch with `answers` (True, False, or None: no answer) until it ends
    (returns the reason and when) or runs out of answers (returns None)."""
    answers = iter(answers)
    calls: list[float] = []

    def node_alive(node_id, timeout_s):
        assert node_id == "n1" and timeout_s > 0
        calls.append(time.monotonic())
        answer = next(answers, Enough)
        if answer is Enough:
            raise Enough
        if answer is None:
            raise TimeoutError("the GCS did not answer")
        return answer

    def end(why):
        raise Ended(why)

    monkeypatch.setattr(fence, "node_alive", node_alive)
    monkeypatch.setattr(fence, "_end", end)
    monkeypatch.setattr(fence, "CHECK_EVERY_S", 0.02)
    started = time.monotonic()
    try:
        fence._watch("n1", lease_s)
    except Ended as ended:
        return str(ended), time.monotonic(), [started] + calls
    except Enough:
        return None


def test_the_answer_dead_ends_the_member_at_once(monkeypatch):
    why, _, calls = watch(monkeypatch, [True, True, False, True], lease_s=None)
    assert "declared this member's node n1 dead" in why and len(calls) == 1 + 3


def test_without_a_lease_no_answer_is_no_decision(monkeypatch):
    assert watch(monkeypatch, [None] * 30, lease_s=None) is None  # a GCS outage: runs on


def test_answers_renew_the_lease(monkeypatch):
    # 0.4 s of answers every 0.02 s... (lease_s / 4 = 0.1 s apart, at most CHECK_EVERY_S)
    assert watch(monkeypatch, [True] * 12, lease_s=0.4) is None


@pytest.mark.parametrize("answered", [0, 3])
def test_a_lease_not_renewed_ends_the_member_a_little_before_it_runs_out(monkeypatch,
                                                                         answered):
    why, ended, calls = watch(monkeypatch, [True] * answered + [None] * 200, lease_s=1.0)
    assert "has not answered for 0.8s (its fence_s is 1s)" in why
    # 0.8 s after the last answer was asked for (or the start): not sooner, and before the
    # lease runs out (the scheduler waits the whole lease before the next attempt)
    assert 0.8 <= ended - calls[answered] < 1.0


def test_no_fence_outside_a_member_actors_process(monkeypatch):
    # A test or a driver that builds a member class in its own process (test_context.py)
    # may later join another cluster, where its node is unknown: it must not be ended.
    started = []
    monkeypatch.setattr(fence.threading, "Thread", lambda **kw: started.append(kw))
    fence.fence("n1", lease_s=1.0)
    assert started == []
