"""A recorded run's path, computed by the reducer, and how each format draws it."""

from __future__ import annotations

import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentfsm import DEFAULT_TABLE, Event, EventFormatError, parse_event, read_events
from agentfsm.diagrams import (
    Overlay,
    Refusal,
    RunNotInLogError,
    Step,
    Trajectory,
    diagram_model,
    format_sequences,
    render_dot,
    render_markdown,
    render_mermaid,
    render_plantuml,
    trajectory_from_events,
    trajectory_from_jsonl,
)
from agentfsm.diagrams._model import EdgeLabel
from agentfsm.diagrams._trajectory import fold_trajectory
from agentfsm.reducers import DEFAULT_REDUCER
from agentfsm.testing import legal_runs
from tests._diagram_tables import TINY

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
TERMINATED = (EXAMPLES / "run_terminated_max_turns.jsonl").read_text().splitlines()
TICKET = (EXAMPLES / "order_ticket.jsonl").read_text().splitlines()
CANCEL = (EXAMPLES / "cancel_order_approval.jsonl").read_text().splitlines()
BAD_RESULT = (
    '{"run_id": "run_123", "sequence": 7, "type": "tool.completed",'
    ' "occurred_at": "2026-09-01T10:00:09+08:00", "action_id": "act_1"}'
)


class TestPath:
    def test_steps_of_a_terminated_run(self) -> None:
        """Each event is a step with its states and the condition that chose the target."""
        path = trajectory_from_jsonl(TERMINATED)
        assert path.steps[:8] == (
            Step(1, "run.started", "created", "running", None),
            Step(2, "model.started", "running", "running", None),
            Step(3, "model.completed", "running", "running", None),
            Step(4, "tool.requested", "running", "waiting_tool", None),
            Step(5, "tool.started", "waiting_tool", "waiting_tool", "first attempt or retry"),
            Step(6, "tool.failed", "waiting_tool", "running", "batch resolved"),
            Step(7, "tool.started", "running", "waiting_tool", "retry"),
            Step(8, "tool.completed", "waiting_tool", "running", "batch resolved"),
        )
        assert path.steps[-1] == Step(14, "run.terminated", "running", "terminated", None)

    def test_end_and_stop_reason(self) -> None:
        """The final state, its terminality and the guard's reason come from the record."""
        path = trajectory_from_jsonl(TERMINATED)
        assert (path.run_id, path.final_state, path.terminal, path.refusal) == (
            "run_123",
            "terminated",
            True,
            None,
        )
        assert path.summary() == (
            "run 'run_123' ended in 'terminated'",
            "stop_reason: max_turns (2 of 2 turns used)",
        )

    def test_visited_states_in_first_visit_order(self) -> None:
        """`visited` starts at the initial state and lists each state once."""
        path = trajectory_from_jsonl(TERMINATED)
        assert path.visited == ("created", "running", "waiting_tool", "terminated")

    def test_sequences_of_one_move(self) -> None:
        """`sequences` gives the traversal order of one move."""
        path = trajectory_from_jsonl(TERMINATED)
        assert path.sequences("waiting_tool", "tool.completed", "running") == (8, 13)

    def test_events_and_jsonl_agree(self) -> None:
        """The same log read as events or as lines gives the same trajectory."""
        events = [e for _, e in read_events(TICKET)]
        assert trajectory_from_events(events) == trajectory_from_jsonl(TICKET)

    def test_a_refused_event_stops_the_path(self) -> None:
        """The path ends before the refused event, which is kept with the reducer's reason."""
        path = trajectory_from_jsonl([*TERMINATED[:6], BAD_RESULT])
        assert (len(path.steps), path.final_state, path.terminal) == (6, "running", False)
        assert path.refusal == Refusal(
            state="running",
            message=(
                "is not allowed; allowed: 'approval.requested', 'handoff', 'model.completed',"
                " 'model.started', 'run.cancel_requested', 'run.completed', 'run.failed',"
                " 'run.paused', 'run.terminated', 'tool.requested', 'tool.started'"
            ),
            sequence=7,
            event="tool.completed",
        )
        assert path.refusal.title == "refused: tool.completed (seq 7)"

    def test_an_unreadable_line_stops_the_path(self) -> None:
        """A line that is not an event ends the path there and names the line."""
        path = trajectory_from_jsonl([*TICKET[:3], '{"run_id": "run_order_O-1001", "seq'])
        assert (len(path.steps), path.refusal is not None) == (3, True)
        assert path.refusal == Refusal(
            state="running",
            message=path.refusal.message if path.refusal else "",
            sequence=None,
            event=None,
            line=4,
        )
        assert path.refusal.message.startswith("line 4: not a valid event: not JSON")
        assert path.refusal.title == "refused: line 4"

    def test_a_broken_line_of_another_run_is_ignored(self) -> None:
        """Lines that clearly belong to another run do not stop this run's path."""
        other = '{"run_id": "other", "sequence": 1, "type": "run.started"}'
        path = trajectory_from_jsonl([*CANCEL, other], run_id="run_cancel_123")
        assert (path.final_state, path.refusal) == ("completed", None)


class TestRunSelection:
    def test_the_only_run_is_chosen(self) -> None:
        """A log with one run needs no run id."""
        assert trajectory_from_jsonl(CANCEL).run_id == "run_cancel_123"

    def test_several_runs_need_a_run_id(self) -> None:
        """Without a run id, a log of several runs is refused, naming them."""
        with pytest.raises(RunNotInLogError) as info:
            trajectory_from_jsonl([*CANCEL, *TICKET])
        assert (info.value.run_id, info.value.available, str(info.value)) == (
            None,
            ("run_cancel_123", "run_order_O-1001"),
            "the log holds 2 runs ('run_cancel_123', 'run_order_O-1001'); name one with a run id",
        )

    def test_the_named_run_is_drawn(self) -> None:
        """A run id picks its events out of a mixed log."""
        path = trajectory_from_jsonl([*CANCEL, *TICKET], run_id="run_order_O-1001")
        assert (path.run_id, len(path.steps)) == ("run_order_O-1001", 14)

    def test_an_unknown_run_id(self) -> None:
        """A run id that is not in the log is refused with the runs that are."""
        with pytest.raises(RunNotInLogError) as info:
            trajectory_from_jsonl(CANCEL, run_id="run_9")
        assert str(info.value) == "the log has no run 'run_9'; it has: 'run_cancel_123'"

    def test_a_log_of_no_events_at_all(self) -> None:
        """When no line is an event, the first line's own problem is raised."""
        with pytest.raises(EventFormatError) as info:
            trajectory_from_jsonl(["", "hello", "{}"])
        assert (info.value.line, info.value.problems) == (
            2,
            ("not JSON (expected value at line 1 column 1)",),
        )

    def test_an_empty_log(self) -> None:
        """No events at all: nothing to draw."""
        with pytest.raises(RunNotInLogError) as info:
            trajectory_from_jsonl(["", "  "])
        assert (str(info.value), info.value.available) == ("the log has no events", ())


class TestOverlay:
    def test_steps_match_edges_and_labels(self) -> None:
        """Each step lands on the label that draws it; collapsed moves become extra edges."""
        model = diagram_model(TINY)
        path = Trajectory(
            run_id="r",
            initial="idle",
            steps=(
                Step(1, "job.start", "idle", "busy", None),
                Step(2, "job.tick", "busy", "busy", None),
                Step(3, "job.tick", "busy", "busy", None),
                Step(4, "job.crash", "busy", "broken", None),
            ),
            final_state="broken",
            terminal=True,
        )
        overlay = Overlay.build(model, path)
        assert overlay.label_sequences == {(0, 0): (1,), (1, 0): (2, 3)}
        assert overlay.extra == (("busy", EdgeLabel(("job.crash",), None, ()), "broken", (4,)),)

    def test_format_sequences(self) -> None:
        """Short lists in full; long ones by their start, end and count."""
        assert (format_sequences((3,)), format_sequences((2, 7, 9))) == ("seq 3", "seq 2, 7, 9")
        assert format_sequences(tuple(range(1, 16))) == "seq 1, 2, 3, …, 15 (15×)"


class TestOverlayRendering:
    def test_mermaid_marks_states_labels_and_the_end(self) -> None:
        """Visited/unvisited/final classes, sequences on taken moves, a note with the reason."""
        text = render_mermaid(diagram_model(TINY), _tiny_path())
        assert "  idle --> busy : job.start {budget} (seq 1)" in text
        assert "  busy : job.tick (seq 2, 3)" in text
        assert "  busy --> broken : job.crash (seq 4)" in text
        assert "  note right of broken\n    run 'r' ended in 'broken'\n  end note" in text
        assert "  class idle, busy visited\n  class done unvisited\n  class broken final" in text

    def test_dot_highlights_the_path(self) -> None:
        """Taken edges are red and thick; untaken ones faded; the end has a note."""
        text = render_dot(diagram_model(TINY), _tiny_path())
        assert (
            '  "idle" -> "busy" [label=<<FONT COLOR="#c0392b"><B>job.start  seq 1</B></FONT>'
            '<BR/><FONT POINT-SIZE="9" COLOR="#a15c00">{budget}</FONT>>,'
            ' color="#c0392b", penwidth=2.4, arrowsize=0.9];'
        ) in text
        assert (
            '  "busy" -> "done" [label=<<FONT COLOR="#b9c0c8">job.end 1. <I>[all good]</I></FONT>>,'
            ' color="#b9c0c8", fontcolor="#b9c0c8"];'
        ) in text
        assert "run &#x27;r&#x27; ended in &#x27;broken&#x27;" in text

    def test_dot_draws_a_refusal(self) -> None:
        """A refused event becomes a red octagon reached by a dashed edge from its state."""
        path = trajectory_from_jsonl([*TERMINATED[:6], BAD_RESULT])
        text = render_dot(diagram_model(DEFAULT_TABLE), path)
        assert '[shape=octagon, style=filled, fillcolor="white", color="#c0392b"' in text
        assert "<B>refused: tool.completed (seq 7)</B>" in text
        assert '  "running" -> "__refused__" [style=dashed, color="#c0392b", penwidth=2];' in text

    def test_plantuml_colours_taken_arrows(self) -> None:
        """PlantUML: red bold arrows for taken moves, stereotypes for states."""
        text = render_plantuml(diagram_model(TINY), _tiny_path())
        assert "idle -[#c0392b,bold]-> busy : job.start {budget} (seq 1)" in text
        assert "state done <<unvisited>>" in text
        assert "state broken <<final>>" in text

    def test_markdown_lists_the_path(self) -> None:
        """Markdown: one row per step, then the end and its reason."""
        text = render_markdown(diagram_model(TINY), _tiny_path())
        assert text.endswith(
            "| 4 | `job.crash` | `busy` |  | `broken` |\n\n- run 'r' ended in 'broken'\n"
        )


def _tiny_path() -> Trajectory:
    return Trajectory(
        run_id="r",
        initial="idle",
        steps=(
            Step(1, "job.start", "idle", "busy", None),
            Step(2, "job.tick", "busy", "busy", None),
            Step(3, "job.tick", "busy", "busy", None),
            Step(4, "job.crash", "busy", "broken", None),
        ),
        final_state="broken",
        terminal=True,
    )


def _runs_log(runs: int) -> Iterator[str]:
    """A log of `runs` runs of two events each, made line by line (never held whole)."""
    for i in range(runs):
        for sequence, fields in ((1, '"type":"run.started"'), (2, '"type":"model.started"')):
            yield (
                f'{{"run_id":"run_{i:05d}","sequence":{sequence},{fields},'
                f'"occurred_at":"2026-09-01T10:00:0{sequence}+00:00"}}'
            )


class TestLargeLogs:
    """A log of many runs is read in one pass, holding the drawn run's events only, and
    what is said about its runs is bounded however many it holds."""

    def test_several_runs_are_named_up_to_ten(self) -> None:
        """Without a run id, a log of 5,000 runs names its first ten and counts the rest;
        `available` still holds every one."""
        with pytest.raises(RunNotInLogError) as info:
            trajectory_from_jsonl(_runs_log(5000))
        first = ", ".join(f"'run_{i:05d}'" for i in range(10))
        assert str(info.value) == (
            f"the log holds 5,000 runs ({first}, and 4,990 more); name one with a run id"
        )
        assert len(info.value.available) == 5000

    def test_an_unknown_run_id_names_ten_runs_too(self) -> None:
        """A run id not in a large log: the message stays one short line."""
        with pytest.raises(RunNotInLogError) as info:
            trajectory_from_jsonl(_runs_log(5000), run_id="run_9")
        first = ", ".join(f"'run_{i:05d}'" for i in range(10))
        assert str(info.value) == f"the log has no run 'run_9'; it has: {first}, and 4,990 more"

    def test_only_the_drawn_run_is_held(self) -> None:
        """Drawing the last of 5,000 runs keeps its events, not the log's 10,000: memory is
        bounded by the run and the runs' ids, not by every event read."""
        tracemalloc.start()
        try:
            path = trajectory_from_jsonl(_runs_log(5000), run_id="run_04999")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert (path.run_id, [s.event for s in path.steps]) == (
            "run_04999", ["run.started", "model.started"],
        )  # fmt: skip
        assert peak < 2 * 2**20, f"{peak:,} bytes"

    def test_a_path_is_read_a_fixed_number_of_times(self) -> None:
        """Drawing a path on a diagram reads its steps a fixed number of times, not once
        per state of the table (which made drawing a long run cost states x steps)."""
        model = diagram_model(TINY)
        ticks = tuple(Step(i, "job.tick", "busy", "busy", None) for i in range(2, 50))
        for render in (render_mermaid, render_dot, render_plantuml):
            steps = _CountedSteps((Step(1, "job.start", "idle", "busy", None), *ticks))
            path = Trajectory(
                run_id="r", initial="idle", steps=steps, final_state="busy", terminal=False
            )
            render(model, path)
            assert steps.reads <= 2, (render.__name__, steps.reads)


#: Lines that are not events: one names no run, one names the cancel run, one another run.
_BROKEN = (
    "hello",
    '{"run_id": "run_cancel_123", "sequence": "x", "type": "run.started"}',
    '{"run_id": "other", "sequence": 1, "type": "run.started"}',
)


@st.composite
def _mixed_logs(draw: st.DrawFn) -> list[str]:
    """One or two runs' lines interleaved (each in its own order), broken lines among them."""
    runs = [list(CANCEL)] + ([list(TICKET)] if draw(st.booleans()) else [])
    log: list[str] = []
    while any(runs):
        run = draw(st.sampled_from([r for r in runs if r]))
        log.append(run.pop(0))
    for broken in draw(st.lists(st.sampled_from(_BROKEN), max_size=3)):
        log.insert(draw(st.integers(0, len(log))), broken)
    return log


def _two_pass(lines: list[str], run_id: str | None) -> tuple[list[int], int | None]:
    """What the path must be, the plain way: every line parsed and held, the run picked
    after, its events up to the first unreadable line that may be its own."""
    items: list[Event | EventFormatError] = []
    for number, raw in enumerate(lines, start=1):
        try:
            items.append(parse_event(raw, line=number))
        except EventFormatError as exc:
            items.append(exc)
    chosen = run_id or next(i.run_id for i in items if not isinstance(i, EventFormatError))
    sequences: list[int] = []
    for item in items:
        if isinstance(item, EventFormatError):
            if item.run_id in (None, chosen):
                return sequences, item.line
        elif item.run_id == chosen:
            sequences.append(item.sequence)
    return sequences, None


@given(log=_mixed_logs(), pick=st.sampled_from([None, "run_cancel_123", "run_order_O-1001"]))
def test_one_pass_draws_what_reading_every_line_first_would(
    log: list[str], pick: str | None
) -> None:
    """Holding only the drawn run's lines changes nothing: the same steps, ended by the same
    unreadable line, as parsing the whole log first and picking the run after."""
    held = {e.run_id for _, e in read_events(line for line in log if line not in _BROKEN)}
    if (pick is None and len(held) > 1) or (pick is not None and pick not in held):
        with pytest.raises(RunNotInLogError):
            trajectory_from_jsonl(log, run_id=pick)
        return
    path = trajectory_from_jsonl(log, run_id=pick)
    refused_at = path.refusal.line if path.refusal is not None else None
    assert ([s.sequence for s in path.steps], refused_at) == _two_pass(log, pick)


class _CountedSteps(tuple[Step, ...]):
    """A path's steps that count how often they are read through."""

    reads = 0

    def __iter__(self) -> Iterator[Step]:
        self.reads += 1
        return super().__iter__()


@given(log=legal_runs(max_events=30), data=st.data())
def test_a_path_folded_on_from_any_point_is_the_path_folded_whole(
    log: list[Event], data: st.DataObject
) -> None:
    """`fold_trajectory(since=...)`: the path and record of a log's first k events, folded on
    by the rest, are those of the whole log folded at once, for any legal log and any k."""
    k = data.draw(st.integers(0, len(log)), label="k")
    run_id = log[0].run_id
    whole = fold_trajectory(run_id, log, DEFAULT_TABLE, DEFAULT_REDUCER)
    head = fold_trajectory(run_id, log[:k], DEFAULT_TABLE, DEFAULT_REDUCER)
    on = fold_trajectory(run_id, log[k:], DEFAULT_TABLE, DEFAULT_REDUCER, since=head)
    assert on[0] == whole[0]
    assert on[1].dumps() == whole[1].dumps()
