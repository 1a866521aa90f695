"""A call is decided once: a second decision on it is refused naming the first (who, when,
why), with nothing written, whether the run still waits on other calls or has moved on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm.errors import ActionError, AlreadyDecidedError, IllegalTransitionError
from agentfsm.events import LogBuilder
from agentfsm.runtime import aapprove, approve, areject, reject
from agentfsm.stores import MemoryEventStore, MemoryStorage, ThreadedAsyncEventStore

NOON = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
_PAST = {"approve": "approved", "reject": "rejected"}


def _at(moment: datetime = NOON) -> Callable[[], datetime]:
    """A clock stopped at `moment`."""
    return lambda: moment


def _waiting(*action_ids: str) -> MemoryEventStore:
    """A store whose run `r1` waits for a decision on each of `action_ids`."""
    calls = [{"action_id": a, "tool": "refund", "arguments": {"order": a}} for a in action_ids]
    log = LogBuilder("r1")
    log.add("run.started", objective="refunds")
    log.add("model.started")
    log.add("model.completed", decision="tool_calls", tool_calls=calls)
    for call in calls:
        log.add("approval.requested", **call)
    store = MemoryEventStore(MemoryStorage())
    store.append("r1", log.events, 0)
    return store


class TestASecondDecisionIsRefused:
    """The verbs look the standing decision up in the run's log and raise it as data."""

    def test_while_the_run_waits_on_another_call(self) -> None:
        """`t1` approved by ann, `t2` still waiting: bob's approval of `t1` names ann's."""
        store = _waiting("t1", "t2")
        approve(store, "r1", "t1", "ann", clock=_at())
        with pytest.raises(AlreadyDecidedError) as info:
            approve(store, "r1", "t1", "bob", clock=_at())
        error = info.value
        assert str(error) == (
            "run 'r1': call 't1' was already approved by 'ann' at 2026-09-01T12:00:00+00:00 "
            "(sequence 6)"
        )
        assert (error.action_id, error.decision, error.decided_by, error.decided_at) == (
            "t1", "approved", "ann", "2026-09-01T12:00:00+00:00",
        )  # fmt: skip
        assert (error.decided_sequence, error.decided_reason) == (6, None)
        assert (error.run_id, error.sequence, error.state, error.event) == (
            "r1", 7, "waiting_approval", "approval.accepted",
        )  # fmt: skip
        assert isinstance(error, ActionError)
        assert isinstance(error.__cause__, ActionError)  # the reducer's own refusal, below
        assert store.load("r1").version == 6

    def test_after_the_run_moved_on(self) -> None:
        """The last call decided, the run is `running`: a rejection of it names the approval
        (not that 'approval.rejected' is not allowed in `running`)."""
        store = _waiting("t1")
        approve(store, "r1", "t1", "ann", reason="order checked", clock=_at())
        with pytest.raises(AlreadyDecidedError) as info:
            reject(store, "r1", "t1", "bob", "too much", clock=_at())
        assert str(info.value) == (
            "run 'r1': call 't1' was already approved by 'ann' at 2026-09-01T12:00:00+00:00 "
            "(sequence 5), with the reason 'order checked'"
        )
        assert (info.value.state, info.value.event) == ("running", "approval.rejected")
        assert isinstance(info.value.__cause__, IllegalTransitionError)
        assert store.load("r1").version == 5

    def test_a_rejection_is_named_with_its_reason(self) -> None:
        """Approving a rejected call names the rejection and why it was made."""
        store = _waiting("t1")
        reject(store, "r1", "t1", "bob", "not your order", clock=_at())
        with pytest.raises(AlreadyDecidedError) as info:
            approve(store, "r1", "t1", "ann")
        assert str(info.value) == (
            "run 'r1': call 't1' was already rejected by 'bob' at 2026-09-01T12:00:00+00:00 "
            "(sequence 5), with the reason 'not your order'"
        )
        assert (info.value.decision, info.value.decided_reason) == ("rejected", "not your order")

    def test_a_decision_by_no_one_named(self) -> None:
        """A decision that named no approver says when, and by no one."""
        store = _waiting("t1")
        approve(store, "r1", "t1", clock=_at())
        with pytest.raises(AlreadyDecidedError) as info:
            approve(store, "r1", "t1", "ann")
        assert str(info.value) == (
            "run 'r1': call 't1' was already approved at 2026-09-01T12:00:00+00:00 (sequence 5)"
        )
        assert info.value.decided_by is None

    def test_the_async_verbs_say_the_same(self) -> None:
        """`aapprove`/`areject` read the log through an async store, to the same error."""
        store = _waiting("t1", "t2")
        approve(store, "r1", "t1", "ann", clock=_at())
        threaded = ThreadedAsyncEventStore(store)
        for verb in (aapprove(threaded, "r1", "t1", "bob"), areject(threaded, "r1", "t1", "bob")):
            with pytest.raises(AlreadyDecidedError) as info:
                asyncio.run(verb)
            assert str(info.value) == (
                "run 'r1': call 't1' was already approved by 'ann' at "
                "2026-09-01T12:00:00+00:00 (sequence 6)"
            )
        assert store.load("r1").version == 6


class TestWhatIsNotASecondDecision:
    """Only a decision that stands is named; other refusals keep their own words."""

    def test_a_call_asked_again_can_be_decided_again(self) -> None:
        """An approved call put to a person again (`approval.requested`) waits anew."""
        store = _waiting("t1")
        approve(store, "r1", "t1", "ann", clock=_at())
        again = LogBuilder("r1", start=6)
        again.add("approval.requested", action_id="t1", tool="refund", arguments={"order": "t1"})
        store.append("r1", again.events, 5)
        assert approve(store, "r1", "t1", "bob").actions["t1"].approver == "bob"

    def test_a_call_that_never_waited_keeps_the_ledgers_refusal(self) -> None:
        """An unknown call is not 'already decided'."""
        store = _waiting("t1")
        with pytest.raises(ActionError) as info:
            approve(store, "r1", "t9", "ann")
        assert type(info.value) is ActionError
        assert str(info.value) == (
            "run 'r1' is 'waiting_approval': event 'approval.accepted' (sequence 5) for action "
            "'t9' is refused: no such action was proposed or requested"
        )


def _decide(store: MemoryEventStore, verb: str, who: str | None) -> None:
    """Approve or reject `t1` of `r1` as `who`, at noon."""
    if verb == "approve":
        approve(store, "r1", "t1", who, clock=_at())
    else:
        reject(store, "r1", "t1", who, "no", clock=_at())


@given(
    decisions=st.lists(
        st.tuples(st.sampled_from(["approve", "reject"]), st.sampled_from(["ann", "bob", None])),
        min_size=2,
        max_size=6,
    ),
    others=st.integers(min_value=0, max_value=2),
)
def test_the_first_decision_stands_and_every_later_one_names_it(
    decisions: list[tuple[str, str | None]], others: int
) -> None:
    """Whatever decisions follow the first, each is refused naming the first, and the log
    holds that first decision only."""
    store = _waiting("t1", *(f"o{i}" for i in range(others)))
    version = store.load("r1").version
    (verb, who), *later = decisions
    _decide(store, verb, who)
    for verb, who in later:
        with pytest.raises(AlreadyDecidedError) as info:
            _decide(store, verb, who)
        error = info.value
        assert (error.decision, error.decided_by) == (_PAST[decisions[0][0]], decisions[0][1])
        assert (error.decided_sequence, error.decided_at) == (version + 1, NOON.isoformat())
    assert store.load("r1").version == version + 1
