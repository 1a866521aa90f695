"""A missing extra is an ImportError that names the extra to install, chained from the original."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

#: (statement, package made unimportable, expected message).
CASES = [
    (
        "from agentfsm.stores.postgres import PostgresEventStore",
        "psycopg",
        "PostgresEventStore needs the 'postgres' extra: pip install 'agentfsm[postgres]'",
    ),
    (
        "from agentfsm.stores.postgres_leases import PostgresLeases",
        "psycopg",
        "PostgresLeases needs the 'postgres' extra: pip install 'agentfsm[postgres]'",
    ),
    (
        "from agentfsm.runtime.procrastinate import ProcrastinateEngine",
        "procrastinate",
        "ProcrastinateEngine needs the 'procrastinate' extra: "
        "pip install 'agentfsm[procrastinate]'",
    ),
    (
        "from agentfsm.adapters.openai_agents import AgentsRun",
        "agents",
        "AgentsRun needs the 'openai-agents' extra: pip install 'agentfsm[openai-agents]'",
    ),
    (
        "from agentfsm.adapters.langgraph import GraphRun",
        "langgraph",
        "GraphRun needs the 'langgraph' extra: pip install 'agentfsm[langgraph]'",
    ),
    (
        "from agentfsm.adapters.langgraph import GraphRun",
        "langchain_core",
        "GraphRun needs the 'langgraph' extra: pip install 'agentfsm[langgraph]'",
    ),
    (
        "from agentfsm.adapters.pydantic_ai import AgentIterRun",
        "pydantic_ai",
        "AgentIterRun needs the 'pydantic-ai' extra: pip install 'agentfsm[pydantic-ai]'",
    ),
    (
        "from agentfsm.adapters.otel import trace_run",
        "opentelemetry",
        "trace_run needs the 'otel' extra: pip install 'agentfsm[otel]'",
    ),
    (
        "from agentfsm import Tool\nTool('t', lambda ctx: None, args={'type': 'object'})",
        "jsonschema",
        "a Tool with a JSON Schema needs the 'jsonschema' extra: pip install "
        "'agentfsm[jsonschema]' (or describe the arguments with a pydantic model)",
    ),
]

PROBE = """
import sys
sys.modules[{package!r}] = None  # what Python does for a package that is not installed
try:
{statement}
except ImportError as error:
    cause = error.__cause__
    assert isinstance(cause, ImportError) and {package!r} in str(cause), repr(cause)
    assert error.name == cause.name, (error.name, cause.name)
    print(error)
else:
    raise SystemExit("no ImportError")
"""


@pytest.mark.parametrize(
    ("statement", "package", "message"), CASES, ids=[f"{c[1]}" for c in CASES]
)
def test_a_missing_extra_names_itself(statement: str, package: str, message: str) -> None:
    """Without the extra's package: the whole message, chained from Python's own error."""
    code = PROBE.format(package=package, statement=textwrap.indent(statement, "    "))
    done = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert done.stdout == message + "\n"
