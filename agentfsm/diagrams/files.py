"""The committed diagram files of a table, regenerated in memory and compared for drift.

A table `agent_run` owns six files in a directory: `agent_run.mmd`, `.dot`, `.puml`, `.md`
(text, compared byte for byte), and `agent_run.svg` and `.png` (pictures Graphviz draws from
the `.dot`).

The pictures are not compared byte for byte. Graphviz output differs between Graphviz
releases (layout and the version comment in the SVG), so a byte comparison would fail on
any machine whose Graphviz is not the one that drew the committed files, and the check
would need Graphviz where the text formats never do. Instead each picture carries the
SHA-256 of the DOT it was drawn from (an XML comment in the SVG, a `tEXt` chunk in the
PNG). The `.dot` itself is compared byte for byte, so a picture is fresh exactly when it
was drawn from the current DOT. `check_diagrams` therefore needs no external tool.
"""

from __future__ import annotations

import hashlib
import re
import struct
import zlib
from collections.abc import Callable
from pathlib import Path

import attrs

from agentfsm.diagrams._model import DiagramModel, diagram_model
from agentfsm.diagrams.dot import render_dot
from agentfsm.diagrams.markdown import render_markdown
from agentfsm.diagrams.mermaid import render_mermaid
from agentfsm.diagrams.plantuml import render_plantuml
from agentfsm.diagrams.svg import render_png, render_svg
from agentfsm.fsm.default import DEFAULT_TABLE
from agentfsm.fsm.table import TransitionTable

__all__ = [
    "DIAGRAM_SUFFIXES",
    "StaleFile",
    "check_diagrams",
    "diagram_stem",
    "dot_digest",
    "picture_digest",
    "write_diagrams",
]

#: The files `write_diagrams` produces for a table, by suffix, in the order they are written.
DIAGRAM_SUFFIXES = (".mmd", ".dot", ".puml", ".md", ".svg", ".png")

_TEXT: dict[str, Callable[[DiagramModel], str]] = {
    ".mmd": render_mermaid,
    ".dot": render_dot,
    ".puml": render_plantuml,
    ".md": render_markdown,
}
_STAMP_KEY = "agentfsm-dot-sha256"
_SVG_STAMP = re.compile(rb"<!-- " + _STAMP_KEY.encode() + rb": ([0-9a-f]{64}) -->")
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@attrs.frozen
class StaleFile:
    """A committed diagram file that does not match the table.

    Attributes:
        path: the file.
        reason: `missing`, `differs` (text), or `drawn from another DOT` (pictures).
    """

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path} is stale ({self.reason})"


def diagram_stem(table: TransitionTable) -> str:
    """The file name stem of a table's diagrams: its name, made safe for file systems."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", table.name) or "table"


def dot_digest(dot_source: str) -> str:
    """The SHA-256 (hex) of DOT text: what the pictures are stamped with."""
    return hashlib.sha256(dot_source.encode("utf-8")).hexdigest()


def _texts(table: TransitionTable) -> dict[str, str]:
    model = diagram_model(table)
    return {suffix: render(model) for suffix, render in _TEXT.items()}


def write_diagrams(directory: Path, table: TransitionTable = DEFAULT_TABLE) -> list[Path]:
    """Regenerate every diagram file of `table` in `directory`; return the paths written.

    Raises:
        ToolMissingError: Graphviz `dot` is not installed (it draws the SVG and PNG).
    """
    texts = _texts(table)
    dot = texts[".dot"]
    digest = dot_digest(dot)
    contents: dict[str, bytes] = {s: t.encode("utf-8") for s, t in texts.items()}
    contents[".svg"] = _stamp_svg(render_svg(dot), digest).encode("utf-8")
    contents[".png"] = _stamp_png(render_png(dot), digest)
    directory.mkdir(parents=True, exist_ok=True)
    stem = diagram_stem(table)
    written = []
    for suffix in DIAGRAM_SUFFIXES:
        path = directory / f"{stem}{suffix}"
        path.write_bytes(contents[suffix])
        written.append(path)
    return written


def check_diagrams(directory: Path, table: TransitionTable = DEFAULT_TABLE) -> list[StaleFile]:
    """The diagram files of `table` in `directory` that are missing or stale (none: fresh).

    Needs no external tool: pictures are checked by the DOT digest they carry.
    """
    texts = _texts(table)
    digest = dot_digest(texts[".dot"])
    stem = diagram_stem(table)
    stale = []
    for suffix in DIAGRAM_SUFFIXES:
        path = directory / f"{stem}{suffix}"
        if not path.is_file():
            stale.append(StaleFile(path, "missing"))
        elif suffix in texts:
            if path.read_bytes() != texts[suffix].encode("utf-8"):
                stale.append(StaleFile(path, "differs from the table"))
        elif picture_digest(path.read_bytes()) != digest:
            stale.append(StaleFile(path, "drawn from another DOT"))
    return stale


def picture_digest(data: bytes) -> str | None:
    """The DOT digest a committed SVG or PNG carries, or None if it carries none."""
    if data.startswith(_PNG_SIGNATURE):
        for kind, body in _png_chunks(data):
            if kind == b"tEXt":
                key, _, value = body.partition(b"\x00")
                if key == _STAMP_KEY.encode():
                    return value.decode("ascii", "replace")
        return None
    found = _SVG_STAMP.search(data)
    return found.group(1).decode("ascii") if found else None


def _stamp_svg(svg: str, digest: str) -> str:
    # After the XML declaration (which must come first), before Graphviz's own comments.
    stamp = f"<!-- {_STAMP_KEY}: {digest} -->\n"
    head, sep, rest = svg.partition("?>\n")
    return f"{head}{sep}{stamp}{rest}" if sep else stamp + svg


def _stamp_png(png: bytes, digest: str) -> bytes:
    # A tEXt chunk right after IHDR (the first chunk, always 8 + 4 + 4 + 13 + 4 bytes in).
    body = _STAMP_KEY.encode("latin-1") + b"\x00" + digest.encode("ascii")
    chunk = (
        struct.pack(">I", len(body))
        + b"tEXt"
        + body
        + struct.pack(">I", zlib.crc32(b"tEXt" + body) & 0xFFFFFFFF)
    )
    end_of_ihdr = len(_PNG_SIGNATURE) + 4 + 4 + 13 + 4
    return png[:end_of_ihdr] + chunk + png[end_of_ihdr:]


def _png_chunks(data: bytes) -> list[tuple[bytes, bytes]]:
    chunks = []
    at = len(_PNG_SIGNATURE)
    while at + 8 <= len(data):
        (length,) = struct.unpack(">I", data[at : at + 4])
        kind = data[at + 4 : at + 8]
        chunks.append((kind, data[at + 8 : at + 8 + length]))
        if kind == b"IEND":
            break
        at += 12 + length
    return chunks
