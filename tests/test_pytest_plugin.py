"""The pytest plugin, loaded by its entry point, and the import independence of the kit."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

EXAMPLES = Path(__file__).parent.parent / "examples"


def _run(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_fixtures_are_available_to_any_project(tmp_path: Path) -> None:
    """A project's tests get the fixtures with no configuration, and failures read well."""
    # The failure is shown at the test's line, with the message (not the helper's frames).
    (tmp_path / "test_runs.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path

            from agentfsm.testing import assert_legal_log

            LOG = Path({str(EXAMPLES / "order_ticket.jsonl")!r})

            def test_table(agent_run_table):
                assert agent_run_table.name == "agent_run"

            def test_legal(agent_run_table):
                lines = LOG.read_text().splitlines()
                assert assert_legal_log(lines, agent_run_table).status == "completed"

            def test_illegal(agent_run_table):
                lines = LOG.read_text().splitlines()
                assert_legal_log(lines[:4] + lines[5:], agent_run_table)
            """
        ),
        encoding="utf-8",
    )
    result = _run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert result.returncode == 1, result.stdout
    out = result.stdout
    assert "1 failed, 2 passed" in out
    assert (
        "IllegalLogError: log is not legal under table 'agent_run': event 5 of 13 is refused"
    ) in out
    assert "test_runs.py:17: IllegalLogError" in out  # the test's line, not the helper's
    assert "     4  tool.requested         running -> waiting_tool" in out


def test_a_conftest_overrides_the_table(tmp_path: Path) -> None:
    """Overriding `agent_run_table` in a conftest makes every fixture use that table."""
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from agentfsm import DEFAULT_TABLE

            @pytest.fixture
            def agent_run_table():
                return DEFAULT_TABLE.derive(
                    name="no_handoffs", remove=[("running", "handoff", "running")]
                )
            """
        ),
        encoding="utf-8",
    )
    (tmp_path / "test_mine.py").write_text(
        textwrap.dedent(
            """
            import pytest
            from agentfsm.events import make_event
            from agentfsm.testing import assert_legal_log

            def test_handoff_is_refused(agent_run_reducer):
                assert agent_run_reducer.table.name == "no_handoffs"
                at = "2026-09-01T10:00:00Z"
                events = [
                    make_event("run.started", run_id="r", sequence=1, occurred_at=at),
                    make_event("handoff", run_id="r", sequence=2, occurred_at=at, to_agent="b"),
                ]
                with pytest.raises(AssertionError, match="table 'no_handoffs'"):
                    assert_legal_log(events, agent_run_reducer)
            """
        ),
        encoding="utf-8",
    )
    result = _run(tmp_path, "-m", "pytest", "-q", "-p", "no:cacheprovider")
    assert result.returncode == 0, result.stdout
    assert "1 passed" in result.stdout


def test_testing_imports_without_pytest(tmp_path: Path) -> None:
    """`agentfsm.testing` and its strategies import when pytest cannot be imported."""
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "import agentfsm.testing\n"
        "from agentfsm.testing import legal_runs, run_machine, assert_legal_log\n"
        "print('ok')\n"
    )
    result = _run(tmp_path, "-c", code)
    assert (result.returncode, result.stdout) == (0, "ok\n"), result.stderr


def test_the_store_kit_without_pytest_says_what_to_install(tmp_path: Path) -> None:
    """Without pytest the kit's process checks and scripted runs load; the conformance
    suites (pytest test classes) say what to install."""
    code = (
        "import sys; sys.modules['pytest'] = None\n"
        "from agentfsm.testing import Tamper, crash_trials, race_appends, scripted_run\n"
        "print(len(scripted_run('r', 1)))\n"
        "try:\n"
        "    from agentfsm.testing import AsyncStoreConformance\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = _run(tmp_path, "-c", code)
    assert (result.returncode, result.stdout) == (
        0,
        "6\nagentfsm.testing.AsyncStoreConformance needs pytest: pip install pytest\n",
    ), result.stderr


def test_plugin_and_assertions_import_without_hypothesis(tmp_path: Path) -> None:
    """Without Hypothesis the plugin still loads; the strategies say what to install."""
    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "import agentfsm.testing.pytest_plugin\n"
        "from agentfsm.testing import assert_legal_log\n"
        "try:\n"
        "    from agentfsm.testing import legal_runs\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    result = _run(tmp_path, "-c", code)
    assert (result.returncode, result.stdout) == (
        0,
        "agentfsm.testing.legal_runs needs Hypothesis: pip install 'agentfsm[testing]'\n",
    ), result.stderr
