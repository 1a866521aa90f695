"""The committed diagrams: regenerated, compared, and stamped with the DOT they come from."""

from __future__ import annotations

import struct
import zlib
from pathlib import Path

import pytest

from agentfsm.diagrams import (
    DIAGRAM_SUFFIXES,
    RenderError,
    StaleFile,
    ToolMissingError,
    check_diagrams,
    diagram_model,
    diagram_stem,
    dot_digest,
    picture_digest,
    render_dot,
    render_png,
    render_svg,
    write_diagrams,
)
from agentfsm.fsm.default import DEFAULT_TABLE
from tests._diagram_tables import TINY, require_dot

REPO = Path(__file__).resolve().parent.parent


class TestCommitted:
    def test_the_committed_diagrams_are_fresh(self) -> None:
        """`diagrams/` matches the default table (run `agentfsm diagram --write` if not)."""
        assert check_diagrams(REPO / "diagrams") == []

    def test_checking_needs_no_graphviz(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """With no `dot` on PATH the check still runs: pictures are checked by digest."""
        monkeypatch.setenv("PATH", "")
        assert check_diagrams(REPO / "diagrams") == []


class TestWriteAndCheck:
    def test_write_then_check(self, tmp_path: Path) -> None:
        """Writing produces the six files, which then check fresh."""
        require_dot()
        written = write_diagrams(tmp_path, TINY)
        assert [p.name for p in written] == [f"tiny{s}" for s in DIAGRAM_SUFFIXES]
        assert check_diagrams(tmp_path, TINY) == []

    def test_each_kind_of_staleness_is_named(self, tmp_path: Path) -> None:
        """A changed text file, a missing one and a picture of another DOT are each reported."""
        require_dot()
        write_diagrams(tmp_path, TINY)
        (tmp_path / "tiny.mmd").write_text("stateDiagram-v2\n", encoding="utf-8")
        (tmp_path / "tiny.puml").unlink()
        svg = render_svg(render_dot(diagram_model(DEFAULT_TABLE)))
        (tmp_path / "tiny.svg").write_text(svg, encoding="utf-8")
        assert check_diagrams(tmp_path, TINY) == [
            StaleFile(tmp_path / "tiny.mmd", "differs from the table"),
            StaleFile(tmp_path / "tiny.puml", "missing"),
            StaleFile(tmp_path / "tiny.svg", "drawn from another DOT"),
        ]
        assert str(StaleFile(Path("d/x.svg"), "missing")) == "d/x.svg is stale (missing)"

    def test_pictures_carry_the_dot_digest(self, tmp_path: Path) -> None:
        """The SVG and the PNG both name the SHA-256 of the committed DOT."""
        require_dot()
        write_diagrams(tmp_path, TINY)
        digest = dot_digest((tmp_path / "tiny.dot").read_text(encoding="utf-8"))
        assert picture_digest((tmp_path / "tiny.svg").read_bytes()) == digest
        assert picture_digest((tmp_path / "tiny.png").read_bytes()) == digest

    def test_a_stamped_png_is_still_a_valid_png(self, tmp_path: Path) -> None:
        """Every chunk of the stamped PNG has a correct CRC, and the file ends with IEND."""
        require_dot()
        write_diagrams(tmp_path, TINY)
        data = (tmp_path / "tiny.png").read_bytes()
        at, kinds, bad = 8, [], []
        while at < len(data):
            (length,) = struct.unpack(">I", data[at : at + 4])
            kind, body = data[at + 4 : at + 8], data[at + 8 : at + 8 + length]
            (crc,) = struct.unpack(">I", data[at + 8 + length : at + 12 + length])
            kinds.append(kind)
            if zlib.crc32(kind + body) != crc:
                bad.append(kind)
            at += 12 + length
        assert (kinds[:2], kinds[-1], bad, at) == ([b"IHDR", b"tEXt"], b"IEND", [], len(data))

    def test_unstamped_pictures_have_no_digest(self) -> None:
        """Plain Graphviz output carries no digest, so it never passes the check."""
        require_dot()
        source = render_dot(diagram_model(TINY))
        svg, png = render_svg(source).encode(), render_png(source)
        assert (picture_digest(svg), picture_digest(png)) == (None, None)

    def test_file_stem_is_file_system_safe(self) -> None:
        """The table's name becomes the stem, with unsafe characters replaced."""
        assert (diagram_stem(DEFAULT_TABLE), diagram_stem(TINY.derive(name="a/b c"))) == (
            "agent_run",
            "a_b_c",
        )


class TestGraphvizErrors:
    def test_missing_dot_says_how_to_install_it(
        self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
    ) -> None:
        """Without `dot`, SVG fails with an error naming the install command; nothing is written."""
        monkeypatch.setenv("PATH", "")
        with pytest.raises(ToolMissingError) as info:
            write_diagrams(tmp_path / "out", TINY)
        assert (info.value.tool, info.value.install, str(info.value)) == (
            "dot",
            "apt-get install graphviz",
            "'dot' is not installed (needed for SVG output); "
            "install it with `apt-get install graphviz`",
        )
        assert not (tmp_path / "out").exists()

    def test_dot_rejecting_input_is_a_render_error(self) -> None:
        """Graphviz's own complaint and exit status are kept."""
        require_dot()
        with pytest.raises(RenderError) as info:
            render_svg("digraph {")
        assert (info.value.tool, info.value.returncode) == ("dot", 1)
        assert "syntax error" in info.value.stderr
