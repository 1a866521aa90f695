"""SVG and PNG from DOT text, by running the real Graphviz `dot`.

This is the only module that needs an external program. It is looked up on `PATH` when a
picture is asked for (never at import), and its absence is a `ToolMissingError` that says
how to install it.
"""

from __future__ import annotations

import shutil
import subprocess

from agentfsm.errors import RenderError, ToolMissingError

__all__ = ["GRAPHVIZ_INSTALL", "graphviz_available", "render_png", "render_svg"]

#: How to get Graphviz on Debian and Ubuntu (macOS: `brew install graphviz`).
GRAPHVIZ_INSTALL = "apt-get install graphviz"

# Generous: the default table lays out in about 0.05 s; a wedged `dot` must not hang CI.
_TIMEOUT_S = 60.0


def graphviz_available(program: str = "dot") -> bool:
    """Whether Graphviz's `dot` (or `program`) is on `PATH`."""
    return shutil.which(program) is not None


def _run_dot(source: str, output_format: str, program: str) -> bytes:
    path = shutil.which(program)
    if path is None:
        raise ToolMissingError(program, GRAPHVIZ_INSTALL, f"{output_format.upper()} output")
    done = subprocess.run(  # noqa: S603 - the program is Graphviz, found on PATH, no shell
        [path, f"-T{output_format}"],
        input=source.encode("utf-8"),
        capture_output=True,
        timeout=_TIMEOUT_S,
        check=False,
    )
    stderr = done.stderr.decode("utf-8", "replace")
    if done.returncode != 0:
        raise RenderError(program, done.returncode, stderr)
    return done.stdout


def render_svg(dot_source: str, *, program: str = "dot") -> str:
    """The SVG Graphviz draws for `dot_source`.

    Raises:
        ToolMissingError: `dot` is not installed.
        RenderError: `dot` rejected the input.
    """
    return _run_dot(dot_source, "svg", program).decode("utf-8")


def render_png(dot_source: str, *, program: str = "dot") -> bytes:
    """The PNG Graphviz draws for `dot_source`.

    Raises:
        ToolMissingError: `dot` is not installed.
        RenderError: `dot` rejected the input.
    """
    return _run_dot(dot_source, "png", program)
