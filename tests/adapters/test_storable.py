"""What every adapter appends passes one gate: values from an SDK a log cannot hold are
recorded as what they are (a failed call, an answer left out, arguments replaced the same
way everywhere), never acknowledged and then unreadable."""

from __future__ import annotations

from typing import Any

from agentfsm.adapters._storable import jsonable, storable
from agentfsm.events import call_digest
from agentfsm.events import models as m
from agentfsm.runtime._writer import Spec

NAN = "the value at 'x' is nan, which JSON cannot hold (numbers must be finite)"


def test_a_result_that_cannot_be_stored_makes_the_call_failed() -> None:
    """`tool.completed` with NaN inside becomes `tool.failed` `unstorable_result`."""
    spec = storable(Spec(m.ToolCompleted, {"action_id": "c1", "result": {"x": float("nan")}}))
    assert spec == Spec(
        m.ToolFailed,
        {
            "action_id": "c1",
            "error": {
                "kind": "unstorable_result",
                "message": f"the tool ran, but its result cannot be stored: {NAN}",
                "retryable": False,
            },
        },
    )


def test_an_answer_that_cannot_be_stored_is_left_out() -> None:
    """A final answer with a lone surrogate is recorded without its output (usage kept)."""
    fields: dict[str, Any] = {
        "decision": "final",
        "output": "a\ud800",
        "usage": {"input_tokens": 3},
    }
    assert storable(Spec(m.ModelCompleted, fields)) == Spec(
        m.ModelCompleted,
        {"decision": "final", "output": None, "usage": {"input_tokens": 3}},
    )


def test_arguments_are_replaced_alike_wherever_the_call_appears() -> None:
    """Proposed, asked for approval and requested: the same replacement, so one digest
    binds all three."""
    bad = {"x": float("inf")}
    proposed = storable(
        Spec(
            m.ModelCompleted,
            {
                "decision": "tool_calls",
                "tool_calls": [{"action_id": "c1", "tool": "t", "arguments": bad}],
            },
        )
    )
    asked = storable(Spec(m.ApprovalRequested, {"action_id": "c1", "tool": "t", "arguments": bad}))
    requested = storable(Spec(m.ToolRequested, {"action_id": "c1", "tool": "t", "arguments": bad}))
    replaced = {
        "_unstorable": "the value at 'x' is inf, which JSON cannot hold (numbers must be finite)"
    }
    assert proposed.fields["tool_calls"][0]["arguments"] == replaced
    assert asked.fields["arguments"] == requested.fields["arguments"] == replaced
    assert call_digest("t", asked.fields["arguments"]) == call_digest("t", replaced)


def test_storable_values_pass_unchanged() -> None:
    """Ordinary JSON goes through as it is."""
    spec = Spec(m.ToolCompleted, {"action_id": "c1", "result": {"x": [1, "two", None]}})
    assert storable(spec) == spec


def test_jsonable_never_raises() -> None:
    """Nesting too deep for the encoder becomes a sentence, not a RecursionError."""
    deep: Any = 1
    for _ in range(100_000):
        deep = [deep]
    assert jsonable(deep) == "<a list that cannot be written as JSON>"
