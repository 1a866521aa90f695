"""`agentfsm diagram`: formats, tables, runs, the drift check, and exit statuses."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from agentfsm.cli import main
from agentfsm.diagrams import diagram_model, render_diagram, render_mermaid, write_diagrams
from agentfsm.fsm.default import DEFAULT_TABLE
from tests._diagram_tables import TINY, require_dot

REPO = Path(__file__).resolve().parent.parent
TICKET = REPO / "examples" / "order_ticket.jsonl"
CANCEL = REPO / "examples" / "cancel_order_approval.jsonl"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


class TestRender:
    def test_mermaid_of_the_default_table_by_default(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """With no options, the default table's Mermaid goes to standard output."""
        assert _run(capsys, "diagram") == (0, render_diagram(DEFAULT_TABLE, "mermaid"), "")

    def test_format_and_output(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """`--format` picks the renderer; `--output` writes the file and prints nothing."""
        target = tmp_path / "t.md"
        assert _run(capsys, "diagram", "--format", "markdown", "-o", str(target)) == (0, "", "")
        assert target.read_text(encoding="utf-8") == render_diagram(DEFAULT_TABLE, "markdown")

    def test_a_table_from_a_module(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`--table module:attr` draws a user's table."""
        code, out, _ = _run(
            capsys, "diagram", "--table", "tests._diagram_tables:TINY", "--format", "dot"
        )
        assert (code, out) == (0, render_diagram(TINY, "dot"))

    def test_expand_draws_every_source(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`--expand` turns off the any-active collapse."""
        code, out, _ = _run(capsys, "diagram", "--table", "tests._diagram_tables:TINY", "--expand")
        assert (code, out) == (0, render_mermaid(diagram_model(TINY, collapse=False)))

    def test_a_run_on_top(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`--run` draws the log's only run; its sequences show on the taken moves."""
        code, out, _ = _run(capsys, "diagram", "--run", str(TICKET))
        assert code == 0
        assert "  running --> completed : run.completed [final output recorded," in out
        assert "nothing unresolved] (seq 14)" in out

    def test_a_run_from_standard_input(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """`--run -` reads the log from standard input."""
        monkeypatch.setattr("sys.stdin", io.StringIO(CANCEL.read_text()))
        code, out, _ = _run(capsys, "diagram", "--run", "-", "--format", "markdown")
        assert (code, out.endswith("- run 'run_cancel_123' ended in 'completed'\n")) == (0, True)

    def test_the_run_id_picks_a_run(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`--run-id` chooses among the runs of a mixed log."""
        log = tmp_path / "both.jsonl"
        log.write_text(TICKET.read_text() + CANCEL.read_text(), encoding="utf-8")
        code, out, _ = _run(capsys, "diagram", "--run", str(log), "--run-id", "run_cancel_123")
        assert (code, "title: \"agent_run: run 'run_cancel_123'\"" in out) == (0, True)

    def test_png_needs_graphviz_and_writes_a_png(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """`--format png` writes PNG bytes."""
        require_dot()
        target = tmp_path / "a.png"
        assert _run(capsys, "diagram", "--format", "png", "-o", str(target)) == (0, "", "")
        assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


class TestDriftCheck:
    def test_fresh(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The committed diagrams check fresh, with one line saying so."""
        assert _run(capsys, "diagram", "--check", "--dir", str(REPO / "diagrams")) == (
            0,
            f"agentfsm diagram --check: the 6 diagrams of 'agent_run' in {REPO / 'diagrams'}/"
            " match the table\n",
            "",
        )

    def test_stale_files_are_named_and_exit_1(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """Each stale file gets a line, then how to regenerate; the status is 1."""
        require_dot()
        write_diagrams(tmp_path)
        (tmp_path / "agent_run.md").write_text("old\n", encoding="utf-8")
        (tmp_path / "agent_run.png").unlink()
        assert _run(capsys, "diagram", "--check", "--dir", str(tmp_path)) == (
            1,
            "",
            f"agentfsm diagram --check: {tmp_path}/agent_run.md is stale (differs from the table)\n"
            f"agentfsm diagram --check: {tmp_path}/agent_run.png is stale (missing)\n"
            "agentfsm diagram --check: regenerate with"
            f" `agentfsm diagram --write --dir {tmp_path}`\n",
        )

    def test_write_regenerates(self, capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
        """`--write` (alias `--update`) writes every file and lists them."""
        require_dot()
        code, out, _ = _run(capsys, "diagram", "--update", "--dir", str(tmp_path))
        assert (code, out.splitlines()[0], len(out.splitlines())) == (
            0,
            f"wrote {tmp_path}/agent_run.mmd",
            6,
        )
        assert _run(capsys, "diagram", "--check", "--dir", str(tmp_path))[0] == 0


class TestYourTable:
    """Diagrams of a user's table, ready for a design review."""

    def test_the_drift_hint_names_the_table(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """Following the hint regenerates *this* table's diagrams, not agentfsm's own."""
        table = "tests._diagram_tables:TINY"
        code, out, err = _run(
            capsys, "diagram", "--check", "--dir", str(tmp_path), "--table", table
        )
        assert (code, out) == (1, "")
        assert err.splitlines()[-1] == (
            "agentfsm diagram --check: regenerate with"
            f" `agentfsm diagram --write --dir {tmp_path} --table {table}`"
        )

    @pytest.mark.parametrize(
        ("fmt", "line"),
        [("mermaid", "  direction TB"), ("dot", "rankdir=TB"), ("plantuml", None)],
    )
    def test_top_to_bottom_for_slides(
        self, capsys: pytest.CaptureFixture[str], fmt: str, line: str | None
    ) -> None:
        """`--direction TB` lays the picture out tall; PlantUML then keeps its own default."""
        code, out, _ = _run(capsys, "diagram", "--format", fmt, "--direction", "TB")
        assert code == 0
        if line is None:
            assert "left to right direction" not in out
        else:
            assert line in out
            assert line.replace("TB", "LR") not in out

    def test_descriptions_are_written_in_the_boxes(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        """Each state's description shows under its name (not only as a tooltip), unless
        `--no-descriptions`."""
        _, out, _ = _run(
            capsys, "diagram", "--format", "dot", "--table", "tests._diagram_tables:TINY"
        )
        assert (
            '"idle" [label=<idle<BR/><FONT POINT-SIZE="9" COLOR="#6b7785">nothing to do</FONT>>'
            in out
        )
        _, out, _ = _run(
            capsys, "diagram", "--format", "dot", "--table", "tests._diagram_tables:TINY",
            "--no-descriptions",
        )  # fmt: skip
        assert '"idle" [tooltip="nothing to do"];' in out

    def test_a_smaller_png_for_a_slide(self, tmp_path: Path) -> None:
        """`--dpi 48` draws the PNG at half Graphviz's default resolution, and `--direction TB`
        narrower still (3,431 x 1,099 pixels become 1,319 x 522 for the default table)."""
        require_dot()
        sizes = {}
        for name, extra in (("wide", []), ("small", ["--dpi", "48", "--direction", "TB"])):
            target = tmp_path / f"{name}.png"
            assert main(["diagram", "--format", "png", "-o", str(target), *extra]) == 0
            header = target.read_bytes()[16:24]
            sizes[name] = (int.from_bytes(header[:4], "big"), int.from_bytes(header[4:], "big"))
        (wide_w, wide_h), (small_w, small_h) = sizes["wide"], sizes["small"]
        assert small_w * 2 < wide_w
        assert small_h < wide_h

    def test_layout_flags_do_not_mix_with_check(self, capsys: pytest.CaptureFixture[str]) -> None:
        """The committed diagrams have one layout: --check refuses layout flags."""
        assert _run(capsys, "diagram", "--check", "--direction", "TB")[0] == 2

    def test_a_dpi_out_of_range_is_a_usage_error(self, capsys: pytest.CaptureFixture[str]) -> None:
        """One clear line, exit 2."""
        assert _run(capsys, "diagram", "--format", "png", "--dpi", "5") == (
            2,
            "",
            "agentfsm diagram: dpi must be between 24 and 600, got 5\n",
        )


class TestUsageErrors:
    @pytest.mark.parametrize(
        ("argv", "message"),
        [
            ([], "agentfsm: the following arguments are required: COMMAND (see `agentfsm --help`)"),
            (
                ["diagram", "--format", "gif"],
                "agentfsm diagram: argument --format: invalid choice: 'gif' (choose from"
                " 'mermaid', 'dot', 'svg', 'plantuml', 'markdown', 'png', 'html')"
                " (see `agentfsm diagram --help`)",
            ),
            (
                ["diagram", "--check", "--format", "dot", "--run", "x.jsonl"],
                "agentfsm diagram: --check covers every committed format; drop --format, --run",
            ),
            (
                ["diagram", "--check", "--write"],
                "agentfsm diagram: argument --write/--update: not allowed with argument --check"
                " (see `agentfsm diagram --help`)",
            ),
            (["diagram", "--run-id", "r"], "agentfsm diagram: --run-id needs --run EVENTS.jsonl"),
            (
                ["diagram", "--table", "nocolon"],
                "agentfsm diagram: --table wants MODULE:ATTR, got 'nocolon'",
            ),
            (
                ["diagram", "--table", "no_such_module_x:T"],
                "agentfsm diagram: cannot import 'no_such_module_x': ModuleNotFoundError:"
                " No module named 'no_such_module_x'",
            ),
            (
                ["diagram", "--table", "tests._diagram_tables:MISSING"],
                "agentfsm diagram: module 'tests._diagram_tables' has no attribute 'MISSING'",
            ),
            (
                ["diagram", "--table", "tests._diagram_tables:NASTY_NAMES"],
                # A tuple may list versions; this one lists names.
                "agentfsm diagram: item 0 of 'tests._diagram_tables:NASTY_NAMES' is a str, "
                "not a TransitionTable",
            ),
            (
                ["diagram", "--run", "/no/such/log.jsonl"],
                "agentfsm diagram: cannot read '/no/such/log.jsonl': No such file or directory",
            ),
        ],
    )
    def test_one_line_and_status_2(
        self, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
    ) -> None:
        """Bad usage prints exactly one line to stderr and returns 2."""
        assert _run(capsys, *argv) == (2, "", message + "\n")

    def test_a_log_of_several_runs_without_a_run_id(
        self, capsys: pytest.CaptureFixture[str], tmp_path: Path
    ) -> None:
        """The library's refusal becomes one `error:` line and status 2."""
        log = tmp_path / "both.jsonl"
        log.write_text(TICKET.read_text() + CANCEL.read_text(), encoding="utf-8")
        assert _run(capsys, "diagram", "--run", str(log)) == (
            2,
            "",
            "agentfsm diagram: error: the log holds 2 runs ('run_order_O-1001', 'run_cancel_123');"
            " name one with a run id\n",
        )

    def test_svg_without_graphviz(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """A missing `dot` is one line saying how to install it, status 2."""
        monkeypatch.setenv("PATH", "")
        assert _run(capsys, "diagram", "--format", "svg") == (
            2,
            "",
            "agentfsm diagram: error: 'dot' is not installed (needed for SVG output);"
            " install it with `apt-get install graphviz`\n",
        )

    def test_help_exits_0(self, capsys: pytest.CaptureFixture[str]) -> None:
        """`--help` prints usage and returns 0."""
        code, out, _ = _run(capsys, "diagram", "--help")
        assert (code, out.startswith("usage: agentfsm diagram [-h]")) == (0, True)


def test_python_dash_m_runs_the_check() -> None:
    """`python -m agentfsm diagram --check` works from the repository root, as CI runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "agentfsm", "diagram", "--check"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stdout, done.stderr) == (
        0,
        "agentfsm diagram --check: the 6 diagrams of 'agent_run' in diagrams/ match the table\n",
        "",
    )


def test_console_script_is_installed() -> None:
    """The `agentfsm` entry point of pyproject.toml resolves to `main`."""
    script = shutil.which("agentfsm", path=str(Path(sys.executable).parent))
    assert script is not None
    done = subprocess.run(
        [script, "diagram", "--format", "markdown"], capture_output=True, text=True, check=False
    )
    assert (done.returncode, done.stdout) == (0, render_diagram(DEFAULT_TABLE, "markdown"))
