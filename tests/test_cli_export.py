"""`agentfsm export`: a complete log, or an error that says the output is not one."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from agentfsm import SQLiteEventStore, dump_event
from tests._cli_helpers import run_main, waiting_store
from tests.stores.conftest import SQLiteTamper


@pytest.fixture
def store(tmp_path: Path) -> Path:
    """Runs `r1` and `r2`, each waiting for approval."""
    return waiting_store(tmp_path / "runs.db", "r1", "r2")


@pytest.fixture
def broken_store(store: Path) -> Path:
    """`r2`'s second row holds `r1`'s event: the store cannot read it back."""
    with SQLiteEventStore(store) as opened:
        foreign = dump_event(list(opened.events("r1"))[1])
    SQLiteTamper(store).set_event_data("r2", 2, foreign)
    return store


def _expected(store: Path, *run_ids: str) -> str:
    with SQLiteEventStore(store) as opened:
        return "".join(dump_event(e) + "\n" for r in run_ids for e in opened.events(r))


class TestToStandardOutput:
    def test_every_run_in_order(self, capsys: pytest.CaptureFixture[str], store: Path) -> None:
        """Each run's events, runs in id order: the log `validate` reads."""
        assert run_main(capsys, "export", "--store", str(store)) == (
            0, _expected(store, "r1", "r2"), ""
        )  # fmt: skip

    def test_a_run_that_does_not_read_back_says_the_output_is_incomplete(
        self, capsys: pytest.CaptureFixture[str], broken_store: Path
    ) -> None:
        """What was printed cannot be taken back; the exit status (1: a stored event does
        not check out) and stderr disown it."""
        code, out, err = run_main(capsys, "export", "--store", str(broken_store))
        assert (code, len(out.splitlines()), err) == (
            1, 5, "agentfsm export: error: run 'r2', sequence 2: the stored event names run "
            "'r1', sequence 2; the output is incomplete\n",
        )  # fmt: skip


class TestToAFile:
    def test_the_file_holds_what_standard_output_would(
        self, capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
    ) -> None:
        """`-o FILE` prints nothing and leaves only the file (no temporary beside it)."""
        target = tmp_path / "out" / "runs.jsonl"
        target.parent.mkdir()
        assert run_main(capsys, "export", "--store", str(store), "-o", str(target)) == (0, "", "")
        assert target.read_text(encoding="utf-8") == _expected(store, "r1", "r2")
        assert list(target.parent.iterdir()) == [target]

    def test_a_failure_leaves_no_file(
        self, capsys: pytest.CaptureFixture[str], broken_store: Path, tmp_path: Path
    ) -> None:
        """A half-written export never appears under the target's name."""
        target = tmp_path / "out" / "runs.jsonl"
        target.parent.mkdir()
        assert run_main(capsys, "export", "--store", str(broken_store), "-o", str(target)) == (
            1, "", "agentfsm export: error: run 'r2', sequence 2: the stored event names run "
            f"'r1', sequence 2; '{target}' was not written\n",
        )  # fmt: skip
        assert list(target.parent.iterdir()) == []

    def test_a_failure_keeps_the_old_file(
        self, capsys: pytest.CaptureFixture[str], broken_store: Path, tmp_path: Path
    ) -> None:
        """An earlier, complete export survives a failed one."""
        target = tmp_path / "runs.jsonl"
        target.write_text("earlier\n", encoding="utf-8")
        code, _, _ = run_main(capsys, "export", "--store", str(broken_store), "-o", str(target))
        assert (code, target.read_text(encoding="utf-8")) == (1, "earlier\n")

    def test_replacing_keeps_who_may_read_it(
        self, capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
    ) -> None:
        """Exporting over a private file does not make it readable by others."""
        target = tmp_path / "runs.jsonl"
        target.write_text("", encoding="utf-8")
        target.chmod(0o600)
        assert run_main(capsys, "export", "--store", str(store), "-o", str(target))[0] == 0
        assert stat.S_IMODE(target.stat().st_mode) == 0o600

    def test_a_missing_directory(
        self, capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
    ) -> None:
        """Cannot write is one line, exit 2."""
        target = tmp_path / "nowhere" / "runs.jsonl"
        assert run_main(capsys, "export", "--store", str(store), "-o", str(target)) == (
            2, "", f"agentfsm export: cannot write '{target}': No such file or directory\n"
        )  # fmt: skip

    def test_an_unknown_run(
        self, capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
    ) -> None:
        """Asking for a run the store lacks writes no file."""
        target = tmp_path / "runs.jsonl"
        code, out, err = run_main(
            capsys, "export", "--store", str(store), "--run-id", "nope", "-o", str(target)
        )
        assert (code, out, err.startswith("agentfsm export: run 'nope' is not in the store")) == (
            2, "", True
        )  # fmt: skip
        assert not target.exists()

    def test_a_symlink_keeps_pointing_at_its_file(
        self, capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
    ) -> None:
        """The file a link names is replaced, not the link, as `>` would write through it."""
        real = tmp_path / "real.jsonl"
        real.write_text("earlier\n", encoding="utf-8")
        link = tmp_path / "link.jsonl"
        link.symlink_to(real)
        assert run_main(capsys, "export", "--store", str(store), "-o", str(link))[0] == 0
        assert (link.is_symlink(), real.read_text(encoding="utf-8")) == (
            True, _expected(store, "r1", "r2")
        )  # fmt: skip

    def test_a_fifo_is_written_in_place(
        self, capsys: pytest.CaptureFixture[str], store: Path, tmp_path: Path
    ) -> None:
        """`-o /dev/stdout` or a named pipe has nothing to replace: renaming over it would
        swap the pipe (or the device) for a file."""
        fifo = tmp_path / "pipe"
        os.mkfifo(fifo)
        reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        try:
            assert run_main(capsys, "export", "--store", str(store), "-o", str(fifo))[0] == 0
            received = os.read(reader, 1 << 16)
        finally:
            os.close(reader)
        assert (stat.S_ISFIFO(fifo.stat().st_mode), received.decode()) == (
            True, _expected(store, "r1", "r2")
        )  # fmt: skip
