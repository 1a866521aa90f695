"""The log commands through the real console script: every exit code, both formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agentfsm import LogBuilder, dump_event
from tests.conftest import EXAMPLES

AGENTFSM = Path(sys.executable).parent / "agentfsm"
ORDER = EXAMPLES / "order_ticket.jsonl"


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `agentfsm ARGS` as a user would; colour off so output is stable."""
    env = {**os.environ, "NO_COLOR": "1"}
    return subprocess.run(
        [str(AGENTFSM), *args], input=stdin, capture_output=True, text=True, env=env, check=False
    )


@pytest.fixture
def broken_log(tmp_path: Path) -> Path:
    """The order run with its final acceptance moved before the last answer."""
    lines = ORDER.read_text(encoding="utf-8").splitlines()
    lines[11] = lines[11].replace('"type": "model.started"', '"type": "run.completed"')
    lines[11] = lines[11].replace(', "reserved_tokens": 1500', "")
    path = tmp_path / "broken.jsonl"
    path.write_text("\n".join(lines[:12]) + "\n", encoding="utf-8")
    return path


class TestValidate:
    def test_a_legal_log_exits_zero(self) -> None:
        """Text output names each run with its final status."""
        result = run("validate", str(ORDER))
        assert result.returncode == 0
        assert result.stdout.splitlines() == [
            "run_order_O-1001  completed  version 14",
            "ok: 14 events in 1 run(s), 14 lines",
        ]

    def test_json_contract_for_a_legal_log(self) -> None:
        """The JSON object others script against."""
        result = run("validate", str(ORDER), "--format", "json")
        assert result.returncode == 0
        assert json.loads(result.stdout) == {
            "ok": True,
            "runs": [
                {
                    "run_id": "run_order_O-1001",
                    "status": "completed",
                    "stop_reason": None,
                    "version": 14,
                }
            ],
            "error": None,
        }

    def test_a_lifecycle_error_exits_one(self, broken_log: Path) -> None:
        """An illegal move: exit 1, with line, state, event and what was allowed."""
        result = run("validate", str(broken_log), "--format", "json")
        assert result.returncode == 1
        error = json.loads(result.stdout)["error"]
        assert {k: error[k] for k in ("kind", "line", "run_id", "sequence", "state", "event")} == {
            "kind": "illegal_transition",
            "line": 12,
            "run_id": "run_order_O-1001",
            "sequence": 12,
            "state": "running",
            "event": "run.completed",
        }
        assert "model.started" in error["allowed"]
        assert error["message"].endswith(
            "condition 'final output recorded, nothing unresolved' "
            "does not hold; allowed: " + ", ".join(f"'{a}'" for a in error["allowed"])
        )

    def test_text_error_shows_the_line_state_and_allowed(self, broken_log: Path) -> None:
        """The text form repeats the offending line, the state, the event and the allowed set."""
        out = run("validate", str(broken_log)).stdout.splitlines()
        assert out[0] == "run_order_O-1001  running  version 11"
        assert out[1].startswith("error (illegal_transition) at line 12: run 'run_order_O-1001'")
        assert out[2].startswith('  line 12: {"run_id": "run_order_O-1001", "sequence": 12')
        assert out[3] == "  state: running   event: run.completed"
        assert out[4].startswith("  allowed: approval.requested, handoff, model.completed")

    def test_a_line_that_is_not_an_event_exits_two(self) -> None:
        """Malformed input is a different exit code from an illegal move."""
        result = run("validate", "-", "--format", "json", stdin='{"run_id": "r", "sequence": 1}\n')
        assert result.returncode == 2
        error = json.loads(result.stdout)["error"]
        assert (error["kind"], error["line"], error["run_id"], error["sequence"]) == (
            "format",
            1,
            "r",
            1,
        )

    def test_guard_limits_audit_a_log(self) -> None:
        """--max-turns reports the first event where the guard would have stopped the run."""
        result = run("validate", str(ORDER), "--max-turns", "2", "--format", "json")
        assert result.returncode == 1
        error = json.loads(result.stdout)["error"]
        assert (error["kind"], error["guard"], error["detail"], error["line"]) == (
            "guard",
            "max_turns",
            "2 of 2 turns used",
            12,
        )

    def test_all_reports_each_runs_first_error(self, tmp_path: Path) -> None:
        """--all keeps going after the first broken run."""
        logs = []
        for rid in ("a", "b"):
            log = LogBuilder(rid)
            log.add("run.started")
            log.add("run.paused", reason="x")
            logs.append(log)
        lines = [dump_event(e) for log in logs for e in log.events]
        lines += [
            lines[1].replace('"sequence":2', '"sequence":3'),
            lines[3].replace('"sequence":2', '"sequence":3'),
        ]
        path = tmp_path / "two.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        result = run("validate", str(path), "--all", "--format", "json")
        assert result.returncode == 1
        doc = json.loads(result.stdout)
        assert [(e["run_id"], e["kind"]) for e in doc["errors"]] == [
            ("a", "illegal_transition"),
            ("b", "illegal_transition"),
        ]

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (
                ["validate", "/no/such.jsonl"],
                "agentfsm validate: cannot read '/no/such.jsonl': No such file or directory",
            ),
            (
                ["validate", str(ORDER), "--deadline", "soon"],
                "agentfsm validate: --deadline: 'soon' is not an RFC 3339 timestamp with an offset (like 2026-09-01T10:02:11+08:00 or 2026-09-01T02:02:11Z)",
            ),
            (
                ["validate", str(ORDER), "--table", "nowhere:TABLE"],
                "agentfsm validate: cannot import 'nowhere': ModuleNotFoundError: No module named 'nowhere'",
            ),
            (
                ["validate", str(ORDER), "--loop-threshold", "1"],
                "agentfsm validate: --loop-threshold must be at least 2",
            ),
        ],
    )
    def test_bad_usage_is_one_line_and_exit_two(self, args: list[str], message: str) -> None:
        """No traceback: one line saying what was wrong."""
        result = run(*args)
        assert result.returncode == 2
        assert result.stderr.strip() == message
        assert result.stdout == ""


class TestReplayInspectSchema:
    def test_replay_json_is_a_list_of_records(self) -> None:
        """DESIGN.md's fields, the ledger keyed by action id."""
        result = run("replay", str(ORDER), "--format", "json")
        assert result.returncode == 0
        (record,) = json.loads(result.stdout)
        assert (record["status"], record["version"], record["turn"]) == ("completed", 14, 3)
        assert set(record["actions"]) == {"act_0001", "act_0002"}
        assert record["actions"]["act_0002"]["result"] == {
            "ticket_id": "T-9001",
            "status": "created",
        }

    def test_replay_text_summary(self) -> None:
        """Status, turns, usage and each action in a few lines."""
        out = run("replay", str(ORDER)).stdout.splitlines()
        assert out[0] == "run run_order_O-1001: completed (version 14, 3 turns)"
        assert "    act_0002  create_ticket  succeeded        1 attempt" in out

    def test_replay_of_a_broken_log_says_why(self, broken_log: Path) -> None:
        """A log that cannot be folded is refused with the lifecycle exit code."""
        result = run("replay", str(broken_log))
        assert result.returncode == 1
        assert result.stderr.startswith(
            "agentfsm replay: cannot fold the log: run 'run_order_O-1001'"
        )

    def test_inspect_shows_each_move(self) -> None:
        """Sequence, event, from -> to, condition, guards."""
        out = run("inspect", str(EXAMPLES / "run_terminated_max_turns.jsonl")).stdout.splitlines()
        assert out[0] == "run run_123"
        assert (
            out[5]
            == "     5  tool.started           waiting_tool -> waiting_tool [first attempt or retry]  guards passed: deadline, budget, max_attempts"
        )
        assert out[-1].startswith("  ends in terminated (max_turns: ")

    def test_inspect_json(self) -> None:
        """Machine-readable steps."""
        doc = json.loads(run("inspect", str(ORDER), "--format", "json").stdout)
        assert doc["steps"][1] == {
            "sequence": 2,
            "event": "model.started",
            "from": "running",
            "to": "running",
            "condition": None,
            "guards": ["max_turns", "deadline", "budget"],
            "caused_by": None,
        }
        assert (doc["final_state"], doc["refused"]) == ("completed", None)

    def test_schema_is_the_committed_one(self) -> None:
        """`agentfsm schema` prints what agentfsm/events/schema.json holds."""
        committed = json.loads(
            (Path(__file__).parent.parent / "agentfsm/events/schema.json").read_text()
        )
        assert json.loads(run("schema").stdout) == committed

    @pytest.mark.parametrize(
        "command",
        [
            "validate",
            "replay",
            "inspect",
            "diagram",
            "schema",
            "check-table",
            "approve",
            "cancel",
            "runs",
            "export",
        ],
    )
    def test_every_command_has_help_with_an_example(self, command: str) -> None:
        """--help works and shows an example invocation."""
        result = run(command, "--help")
        assert result.returncode == 0
        assert f"agentfsm {command}" in result.stdout
        assert "example" in result.stdout

    def test_python_dash_m_works(self) -> None:
        """`python -m agentfsm` is the same program."""
        result = subprocess.run(
            [sys.executable, "-m", "agentfsm", "validate", str(ORDER)],
            capture_output=True,
            text=True,
            check=False,
        )
        assert result.returncode == 0
