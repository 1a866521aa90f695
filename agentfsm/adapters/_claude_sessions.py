"""The CLI's session transcript, kept in our store so a paused run resumes on any machine.

The `claude` CLI keeps a conversation in one JSON-lines file,
`<config dir>/projects/<cwd, every character but letters and digits as '-'>/<session id>.jsonl`
(the config dir is `CLAUDE_CONFIG_DIR`, by default `~/.claude`). `--resume <session id>` reads
it from there, so a run paused on one machine would resume only where that directory is.
At a pause the adapter keeps the file as the run's attachment `TRANSCRIPT`; before a drive
it writes it back where this process's CLI will look (its config dir and working directory),
unless a file is already there. Found by the bundled CLI 2.1.x; a CLI that keeps sessions
elsewhere finds none restored and resumes only where its own files are, as before.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = ["TRANSCRIPT", "restore", "transcript"]

#: The attachment a paused run's CLI transcript is kept under (bytes, the `.jsonl` file).
TRANSCRIPT = "claude-agent-sdk/transcript"


def _config_dir(options: Any) -> Path:
    env = dict(getattr(options, "env", None) or {})
    configured = env.get("CLAUDE_CONFIG_DIR") or os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(configured) if configured else Path.home() / ".claude"


def _project(cwd: str | os.PathLike[str] | None) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", str(Path(cwd or os.getcwd()).resolve()))


def transcript(options: Any, session_id: str) -> bytes | None:
    """The CLI's transcript of `session_id` under the options' config dir, or None."""
    projects = _config_dir(options) / "projects"
    mine = projects / _project(options.cwd) / f"{session_id}.jsonl"
    found = [mine] if mine.is_file() else sorted(projects.glob(f"*/{session_id}.jsonl"))
    return found[0].read_bytes() if found else None


def restore(options: Any, session_id: str, data: bytes) -> Path | None:
    """Write the kept transcript where this process's CLI looks for `session_id`, unless a
    file is there already (the CLI's own is as new). The path written, or None."""
    path = _config_dir(options) / "projects" / _project(options.cwd) / f"{session_id}.jsonl"
    if path.exists():
        return None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path
