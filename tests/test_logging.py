"""A library that logs like one: silent by default, the application's choice once it chooses."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import structlog

from agentfsm import (
    Agent,
    Decision,
    MaxTurns,
    ProposedCall,
    Runner,
    ScriptedModel,
    SQLiteEventStore,
    Tool,
)
from agentfsm._log import get_logger

#: A run a guard stops: info lines for each transition and a warning (`guard.rejected`).
RUN = textwrap.dedent(
    """
    from agentfsm import (Agent, Decision, MaxTurns, ProposedCall, Runner, ScriptedModel,
                          SQLiteEventStore, Tool)

    model = ScriptedModel([Decision.call_tools(ProposedCall("get", {"k": 1}))] * 5, by_turn=True)
    agent = Agent("a", model, [Tool("get", lambda ctx: {"ok": True}, idempotent=True)])
    result = Runner(SQLiteEventStore(":memory:"), agent, guards=[MaxTurns(2)]).run("r1", "go")
    assert result.stop_reason == "max_turns", result
    """
)


def _run(setup: str, after: str = "") -> subprocess.CompletedProcess[str]:
    """Run `setup`, the guarded run, then `after` in a fresh interpreter; output captured."""
    code = textwrap.dedent(setup) + RUN + textwrap.dedent(after)
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_a_run_prints_nothing_by_default() -> None:
    """Nothing configured: not a line on stdout, nor the guard's warning on stderr."""
    done = _run(
        "import structlog\n",
        "assert not structlog.is_configured(), 'the library configured structlog'\n",
    )
    assert (done.stdout, done.stderr) == ("", "")


def test_the_lines_go_to_the_stdlib_logger_agentfsm_once_logging_is_configured() -> None:
    """An application that configures only `logging` gets the lines under `agentfsm`."""
    done = _run(
        """
        import logging, sys
        logging.basicConfig(stream=sys.stdout, level=logging.INFO,
                            format="%(name)s|%(levelname)s|%(message)s")
        """
    )
    lines = done.stdout.splitlines()
    assert done.stderr == ""
    assert lines[0] == (
        "agentfsm|INFO|transition.applied event_type='run.started' from_state='created' "
        "run_id='r1' sequence=1 to_state='running'"
    )
    assert (
        "agentfsm|WARNING|guard.rejected detail='2 of 2 turns used' event_type='model.started' "
        "from_state='running' guard='max_turns' run_id='r1' sequence=12 stop_reason='max_turns'"
    ) in lines


def test_the_fields_ride_on_the_log_record() -> None:
    """A structured `logging` handler reads the fields from `record.agentfsm`."""
    done = _run(
        """
        import logging
        records = []
        handler = logging.Handler()
        handler.emit = records.append
        logging.getLogger("agentfsm").addHandler(handler)
        logging.getLogger("agentfsm").setLevel(logging.INFO)
        """,
        """
        first = records[0]
        assert (first.getMessage().split()[0], first.agentfsm["run_id"]) == (
            "transition.applied", "r1"), first.__dict__
        """,
    )
    assert (done.stdout, done.stderr) == ("", "")


def test_an_application_that_configures_structlog_gets_its_configuration() -> None:
    """Once structlog is configured, its processors and logger factory are used, not `logging`."""
    done = _run(
        """
        import sys, structlog
        structlog.configure(
            processors=[structlog.processors.KeyValueRenderer(key_order=["event", "sequence"])],
            logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        )
        """
    )
    assert done.stdout == ""
    assert done.stderr.splitlines()[0].startswith("event='transition.applied' sequence=1 ")


def test_capture_logs_sees_a_logger_made_and_bound_before_it() -> None:
    """The route is chosen per line, so a Runner built earlier is still captured."""
    model = ScriptedModel([Decision.call_tools(ProposedCall("get", {"k": 1}))] * 5, by_turn=True)
    agent = Agent("a", model, [Tool("get", lambda ctx: {"ok": True}, idempotent=True)])
    runner = Runner(SQLiteEventStore(":memory:"), agent, guards=[MaxTurns(1)])
    with structlog.testing.capture_logs() as logs:
        runner.run("r1", "go")
    assert {"event": "transition.applied", "run_id": "r1", "sequence": 1} | {
        "event_type": "run.started",
        "from_state": "created",
        "to_state": "running",
        "log_level": "info",
    } in logs
    assert [e["stop_reason"] for e in logs if e["event"] == "guard.rejected"] == ["max_turns"]


def test_bind_adds_context_and_leaves_the_original_alone() -> None:
    """`bind` returns a new logger; the one it came from logs without the new fields."""
    base = get_logger("agentfsm.test")
    bound = base.bind(run_id="r1")
    with structlog.testing.capture_logs() as logs:
        bound.info("x", n=1)
        base.info("y")
    assert logs == [
        {"event": "x", "n": 1, "run_id": "r1", "log_level": "info"},
        {"event": "y", "log_level": "info"},
    ]


def test_the_default_logger_says_whether_a_level_would_go_anywhere() -> None:
    """Through structlog's configuration when there is one, else the `logging` level."""
    import logging as _logging

    from agentfsm._log import get_logger, info_enabled

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(_logging.CRITICAL))
    try:
        assert not info_enabled(get_logger().bind(run_id="r1"))
        structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(_logging.INFO))
        assert info_enabled(get_logger().bind(run_id="r1"))
    finally:
        structlog.reset_defaults()
    assert info_enabled(object())  # a logger that cannot say takes every line
