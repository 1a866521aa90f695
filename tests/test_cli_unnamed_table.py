"""A log whose runs never started is checked against the default table, and `validate` says so.

A run may end straight from `created` (`run.failed`, `run.terminated`), so a log, a kit's
counterexample among them, can hold no `run.started` to name its table. Without `--table`,
`validate` then checks it against the default table: never silently, since the log may be of
another lifecycle.
"""

from __future__ import annotations

from pathlib import Path

from agentfsm.events import LogBuilder, dump_event
from tests._cli_helpers import run_script

NOTE = (
    "note: no run.started in the log names its table: checked against the default table "
    "'agent_run' (give --table for another)"
)


def _log(tmp_path: Path, *types: str) -> Path:
    log = LogBuilder("r1")
    for t in types:
        if t == "run.failed":
            log.add(t, error={"kind": "k", "message": "m"})
        else:
            log.add(t)
    path = tmp_path / "log.jsonl"
    path.write_text("".join(dump_event(e) + "\n" for e in log.events))
    return path


def test_a_log_whose_run_never_started_says_which_table_checked_it(tmp_path: Path) -> None:
    for jobs in ("1", "2"):
        result = run_script("validate", str(_log(tmp_path, "run.failed")), "--jobs", jobs)
        assert (result.returncode, result.stderr) == (0, "")
        assert result.stdout.splitlines()[-1] == NOTE


def test_a_log_that_starts_its_run_says_nothing_more(tmp_path: Path) -> None:
    result = run_script("validate", str(_log(tmp_path, "run.started", "run.failed")))
    assert (result.returncode, result.stderr) == (0, "")
    assert NOTE not in result.stdout


def test_a_table_given_says_nothing_more(tmp_path: Path) -> None:
    path = _log(tmp_path, "run.failed")
    result = run_script("validate", str(path), "--table", "agentfsm.fsm.default:DEFAULT_TABLE")
    assert result.returncode == 0
    assert NOTE not in result.stdout
