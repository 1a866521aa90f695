"""`.ci/run` is what CI runs on a clean clone: it must at least be a valid shell script.

Several hands edit it (each new real tool adds an install step); a broken edit would stop
CI before a single test ran, so the suite, which anyone runs first, checks its syntax.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / ".ci" / "run"


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash on this machine")
def test_the_ci_script_is_valid_bash_that_runs_make_test() -> None:
    """`bash -n` accepts it, and its last command is the README's `make test`."""
    checked = subprocess.run(
        ["bash", "-n", str(SCRIPT)], capture_output=True, text=True, check=False
    )
    assert (checked.returncode, checked.stderr) == (0, "")
    commands = [
        line.strip()
        for line in SCRIPT.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    assert commands[-1] == "make test"
