"""Loop detection: repeated calls with nothing new observed, polling, fingerprints."""

from __future__ import annotations

from typing import Any

import pytest

from agentfsm import parse_event
from agentfsm.guards import LoopDetector, fingerprint, fingerprints
from agentfsm.reducers import Reducer
from tests.guardlogs import fold, model_call, new_run, refusal, tool_call, value_error

DETECTOR = Reducer(guards=[LoopDetector(threshold=3, window=10)])
Q = {"q": "shoes", "page": 1}
FATAL = {"kind": "x", "message": "", "retryable": False}


def _loop(results: list[Any], *, tool: str = "search", fail: bool = False) -> list[Any]:
    """A run calling `tool(Q)` once per result, then requesting it once more."""
    log = new_run()
    for i, result in enumerate(results):
        tool_call(log, f"a{i}", tool, Q, result=result, fail=fail)
    log.add("tool.requested", action_id="again", tool=tool, arguments=Q)
    return log.events


class TestLoopDetector:
    def test_repeated_failures_trip_at_the_threshold(self) -> None:
        """Two failed identical calls, then a third request: refused (nothing was observed)."""
        err = refusal(DETECTOR, _loop([None, None], fail=True))
        assert (err.guard, err.stop_reason, err.detail) == (
            "loop_detected",
            "loop_detected",
            "'search' requested 3 times with the same arguments and no new observation "
            "within the last 10 actions",
        )
        assert err.event == "tool.requested"

    def test_the_first_result_is_an_observation(self) -> None:
        """Identical results: the first one was new, so the third request still passes."""
        assert fold(DETECTOR, _loop([{"n": 0}, {"n": 0}])).status == "waiting_tool"

    def test_identical_results_trip_once_repeated_threshold_times(self) -> None:
        """Three calls that saw the same facts (after the first result) trip the guard."""
        err = refusal(DETECTOR, _loop([{"n": 0}, {"n": 0}, {"n": 0}]))
        assert err.stop_reason == "loop_detected"

    def test_a_changing_result_is_progress(self) -> None:
        """A call whose result changes every time never trips, however often it repeats."""
        assert fold(DETECTOR, _loop([{"n": i} for i in range(8)])).status == "waiting_tool"

    def test_a_flipping_result_is_progress_too(self) -> None:
        """A -> B -> A -> B: every change is new (a digest of facts would call it a loop)."""
        assert fold(DETECTOR, _loop(["A", "B"] * 4)).status == "waiting_tool"

    def test_a_new_fact_from_another_tool_resets_the_count(self) -> None:
        """Between two repeats, another tool's new result counts as progress."""
        log = new_run()
        tool_call(log, "a1", "search", Q, fail=True)
        tool_call(log, "a2", "search", Q, fail=True)
        tool_call(log, "b1", "inbox", {}, result={"new": 1})
        tool_call(log, "a3", "search", Q, fail=True)
        log.add("tool.requested", action_id="a4", tool="search", arguments=Q)
        assert fold(DETECTOR, log.events).status == "waiting_tool"

    def test_repeats_outside_the_window_do_not_count(self) -> None:
        """With a window of 3, two repeats three actions apart are not a loop."""
        log = new_run()
        tool_call(log, "a1", "search", Q, fail=True)
        tool_call(log, "b1", "other", {"x": 1}, fail=True)
        tool_call(log, "b2", "other", {"x": 2}, fail=True)
        tool_call(log, "a2", "search", Q, fail=True)
        log.add("tool.requested", action_id="a3", tool="search", arguments=Q)
        reducer = Reducer(guards=[LoopDetector(threshold=3, window=3)])
        assert fold(reducer, log.events).status == "waiting_tool"
        wider = Reducer(guards=[LoopDetector(threshold=3, window=5)])
        assert refusal(wider, log.events).detail.endswith("within the last 5 actions")

    def test_a_result_seen_before_the_window_is_not_new_inside_it(self) -> None:
        """The oldest action in the window repeats a result from before it: no progress."""
        reducer = Reducer(guards=[LoopDetector(threshold=3, window=3)])
        events = _loop(["r", "r", "r"])  # the window: the last two calls and the request
        assert refusal(reducer, events).detail == (
            "'search' requested 3 times with the same arguments and no new observation "
            "within the last 3 actions"
        )

    def test_other_arguments_are_another_call(self) -> None:
        """Different argument values make a different call."""
        log = new_run()
        for page in range(5):
            tool_call(log, f"a{page}", "search", {"q": "shoes", "page": page}, fail=True)
        assert fold(DETECTOR, log.events).status == "running"

    def test_proposed_calls_count_when_requested_and_rejected_ones_never(self) -> None:
        """Calls proposed by the model count once requested; a rejected proposal never ran."""
        log = new_run()
        call = {"tool": "search", "arguments": Q}
        model_call(log, {"action_id": "a1", **call}, {"action_id": "a2", **call})
        log.add("approval.requested", action_id="a2", **call)
        log.add("approval.rejected", action_id="a2", reason="no")
        log.add("tool.requested", action_id="a1", **call)
        log.add("tool.started", action_id="a1")
        log.add("tool.failed", action_id="a1", error=FATAL)
        model_call(log, {"action_id": "a3", **call})
        log.add("tool.requested", action_id="a3", **call)
        assert fold(DETECTOR, log.events).status == "waiting_tool"  # a2 never ran
        log.add("tool.started", action_id="a3")
        log.add("tool.failed", action_id="a3", error=FATAL)
        model_call(log, {"action_id": "a4", **call})
        log.add("tool.requested", action_id="a4", **call)
        assert refusal(DETECTOR, log.events).detail.startswith("'search' requested 3 times")


class TestPolling:
    POLL = Reducer(guards=[LoopDetector(threshold=3, window=4, polling={"status": 5})])

    def test_a_poll_may_repeat_an_unchanged_result_up_to_its_limit(self) -> None:
        """Five polls that saw the same result (after the first) are allowed."""
        events = _loop(["pending"] * 5, tool="status")
        assert fold(self.POLL, events).status == "waiting_tool"

    def test_one_poll_over_the_limit_is_refused(self) -> None:
        """The sixth poll with an unchanged result is refused, naming the poll limit."""
        err = refusal(self.POLL, _loop(["pending"] * 6, tool="status"))
        assert err.detail == "'status' polled 6 times with an unchanged result (poll limit 5)"

    def test_a_poll_whose_result_changes_may_go_on(self) -> None:
        """Polls whose result changes are never a loop, past the poll limit or not."""
        events = _loop([f"{i}%" for i in range(0, 100, 10)], tool="status")
        assert fold(self.POLL, events).status == "waiting_tool"

    def test_non_polling_tools_keep_the_threshold(self) -> None:
        """Declaring one tool as polling leaves the others under the plain threshold."""
        assert refusal(self.POLL, _loop([None, None], fail=True)).stop_reason == "loop_detected"


class TestFingerprint:
    def test_key_order_whitespace_and_number_spelling_do_not_matter(self) -> None:
        """The same arguments written differently have one fingerprint."""
        texts = [
            '{"q": "shoes", "page": 1, "f": {"a": 1, "b": [1.0]}}',
            '{"f":{"b":[1e0],"a":1.0},"page":1.0,"q":"shoes"}',
            '{ "page" : 1 , "q" : "shoes" , "f" : { "b" : [ 1 ] , "a" : 1 } }',
        ]
        prints = {fingerprint("search", _arguments(t), 0) for t in texts}
        assert len(prints) == 1

    def test_a_bool_is_not_a_number(self) -> None:
        """`true` and `1` are different arguments."""
        assert fingerprint("t", {"x": True}, 0) != fingerprint("t", {"x": 1}, 0)

    def test_tool_arguments_and_state_all_count(self) -> None:
        """Changing the tool, an argument value, or the state changes the fingerprint."""
        base = fingerprint("t", {"x": 1}, 0)
        assert base != fingerprint("u", {"x": 1}, 0)
        assert base != fingerprint("t", {"x": 2}, 0)
        assert base != fingerprint("t", {"x": 1}, 1)

    def test_the_detector_sees_differently_spelled_arguments_as_one_call(self) -> None:
        """Reordered keys and `1.0` for `1` are the same call to the detector."""
        log = new_run()
        tool_call(log, "a1", "search", {"q": "s", "page": 1}, fail=True)
        tool_call(log, "a2", "search", {"page": 1.0, "q": "s"}, fail=True)
        log.add("tool.requested", action_id="a3", tool="search", arguments={"page": 1, "q": "s"})
        assert refusal(DETECTOR, log.events).stop_reason == "loop_detected"

    def test_fingerprints_follow_the_observation_count(self) -> None:
        """Each executed action is fingerprinted with the observations made before it."""
        record = fold(DETECTOR, _loop(["r", "r"])[:-1])
        assert fingerprints(record) == (
            ("a0", fingerprint("search", Q, 0)),
            ("a1", fingerprint("search", Q, 1)),
        )


class TestValidation:
    @pytest.mark.parametrize(
        ("kwargs", "message"),
        [
            ({"threshold": 1}, "threshold must be an integer >= 2, got 1"),
            (
                {"threshold": 4, "window": 3},
                "window (3) must be at least threshold (4): a smaller window could never "
                "hold enough repeats",
            ),
            ({"polling": {"status": 0}}, "poll limit of 'status' must be an integer >= 1, got 0"),
        ],
    )
    def test_bad_settings_are_refused(self, kwargs: dict[str, Any], message: str) -> None:
        """Settings that could never work are definition errors."""
        with value_error(message):
            LoopDetector(**kwargs)


def _arguments(text: str) -> dict[str, Any]:
    event = parse_event(
        '{"run_id": "r", "sequence": 2, "type": "tool.requested", '
        '"occurred_at": "2026-09-01T10:00:00Z", "action_id": "a", "tool": "search", '
        f'"arguments": {text}}}'
    )
    return dict(event.arguments)  # type: ignore[union-attr]
