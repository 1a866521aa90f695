"""Whatever a log holds, the log commands answer 0, 1 or 2 and never raise.

Hypothesis writes logs of hostile lines (arbitrary JSON values, nesting deeper than Python
recurses, `NaN`/`Infinity` tokens, lone surrogate escapes, integers past Python's digit
limit, duplicate keys, bytes that are not UTF-8) among legal ones, and runs `validate`,
`replay` and `inspect` on them in both formats, with standard output as strict as a real
one (UTF-8, surrogates refused); `diagram --run` reads logs the same way and is run too.
"""

from __future__ import annotations

import io
import json
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentfsm.cli import main
from tests._cli_helpers import waiting_log

LEGAL = waiting_log()
FIELDS = ["run_id", "sequence", "type", "occurred_at", "objective", "tool_calls", "arguments"]

scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()  # NaN and the infinities become the bare tokens json.dumps writes
    | st.text(st.characters(exclude_categories=()), max_size=8)  # lone surrogates too
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


def _deep(depth: int, kind: str) -> str:
    return "[" * depth + "]" * depth if kind == "[" else '{"a":' * depth + "1" + "}" * depth


def _set_field(line: str, field: str, value: Any) -> str:
    event = json.loads(line)
    event[field] = value
    return json.dumps(event)  # ensure_ascii: a lone surrogate is written as its escape


def _deep_arguments(line: str, depth: int) -> str:
    return line.replace('"order_id":123', f'"order_id":{_deep(depth, "[")}')


def _bare_token(line: str, token: str) -> str:
    # Tokens json.dumps would not write itself: a number past Python's 4300-digit limit.
    return line.replace("123", token)


def _duplicate_key(line: str) -> str:
    return line[:-1] + ', "run_id": "other"}'


hostile_lines = st.one_of(
    st.builds(json.dumps, json_values),
    st.builds(_deep, st.integers(1, 3000), st.sampled_from(["[", "{"])),
    st.builds(_set_field, st.sampled_from(LEGAL), st.sampled_from(FIELDS), json_values),
    st.builds(_deep_arguments, st.sampled_from(LEGAL), st.integers(1, 1500)),
    st.builds(
        _bare_token,
        st.sampled_from(LEGAL),
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1e999", "9" * 5000]),
    ),
    st.builds(_duplicate_key, st.sampled_from(LEGAL)),
    st.text(max_size=30),
    st.just(""),
)
raw_lines = st.one_of(
    st.sampled_from(LEGAL).map(str.encode),
    hostile_lines.map(lambda text: text.encode("utf-8", "surrogatepass")),
    st.binary(max_size=20).map(lambda data: data.replace(b"\n", b"")),
)
invocations = st.sampled_from(
    [
        ["validate", "LOG"],
        ["validate", "LOG", "--format", "json"],
        ["validate", "LOG", "--all", "--format", "json", "--allow-empty"],
        ["replay", "LOG"],
        ["replay", "LOG", "--format", "json", "--run-id", "r1"],
        ["inspect", "LOG"],
        ["inspect", "LOG", "--format", "json"],
        ["diagram", "--run", "LOG", "--format", "markdown"],
    ]
)


def _strict_stream() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")


def _refuse_constant(token: str) -> Any:
    raise AssertionError(f"RFC 8259 has no {token}")


@settings(max_examples=300, deadline=None)
@given(lines=st.lists(raw_lines, max_size=7), argv=invocations)
def test_log_commands_never_raise(lines: list[bytes], argv: list[str]) -> None:
    """Exit 0, 1 or 2; no exception, none left to the last-resort handler; JSON is JSON."""
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "log.jsonl"
        log.write_bytes(b"".join(line + b"\n" for line in lines))
        out, err = _strict_stream(), _strict_stream()
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(log) if arg == "LOG" else arg for arg in argv])
            out.flush()
            err.flush()
    stdout = out.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
    stderr = err.buffer.getvalue().decode("utf-8")  # type: ignore[attr-defined]
    assert code in (0, 1, 2)
    assert "Traceback" not in stderr
    # What no handler foresaw reaches the last resort: "agentfsm CMD: unexpected TypeError: ...".
    assert f"agentfsm {argv[0]}: unexpected " not in stderr, stderr
    assert len(stderr.splitlines()) <= 1
    if "json" in argv and stdout:
        json.loads(stdout, parse_constant=_refuse_constant)
