"""The API reference's pages, and the check that every public name on them is documented.

The public surface is the top-level `agentfsm` names and the `__all__` of each public
namespace below. A page per namespace is generated at build time (nothing to keep in step by
hand); a public name whose docstring is empty fails the build, naming it and its file.
"""

from __future__ import annotations

from pathlib import Path

import griffe

from docsite.comment_docstrings import CommentDocstrings

ROOT = Path(__file__).resolve().parent.parent

#: The namespaces a user imports from, in the order the reference lists them.
NAMESPACES = (
    "agentfsm",
    "agentfsm.fsm",
    "agentfsm.fsm.default",
    "agentfsm.fsm.check",
    "agentfsm.fsm.diff",
    "agentfsm.fsm.needs",
    "agentfsm.fsm.registry",
    "agentfsm.events",
    "agentfsm.reducers",
    "agentfsm.reducers.validate",
    "agentfsm.guards",
    "agentfsm.runtime",
    "agentfsm.runtime.procrastinate",
    "agentfsm.stores",
    "agentfsm.stores.memory",
    "agentfsm.stores.sqlite",
    "agentfsm.stores.postgres",
    "agentfsm.stores.postgres_leases",
    "agentfsm.errors",
    "agentfsm.names",
    "agentfsm.diagrams",
    "agentfsm.testing",
    "agentfsm.testing.fixtures.claude_transport",
    "agentfsm.testing.fixtures.postgres_server",
    "agentfsm.ui",
    "agentfsm.adapters.openai_agents",
    "agentfsm.adapters.langgraph",
    "agentfsm.adapters.pydantic_ai",
    "agentfsm.adapters.claude_agent_sdk",
    "agentfsm.adapters.otel",
    "agentfsm.adapters.structlog",
    "agentfsm.adapters.transitions",
)


def load() -> griffe.Module:
    """The package as mkdocstrings sees it: read from source, `#:` comments as docstrings."""
    return griffe.load(
        "agentfsm",
        search_paths=[str(ROOT)],
        extensions=griffe.load_extensions(CommentDocstrings),
        resolve_aliases=True,
        resolve_external=False,
    )


def namespace_module(package: griffe.Module, namespace: str) -> griffe.Module:
    """The griffe module of `namespace` (a dotted name under `agentfsm`)."""
    if namespace == "agentfsm":
        return package
    module = package[namespace.removeprefix("agentfsm.")]
    assert isinstance(module, griffe.Module)
    return module


def exports(package: griffe.Module, namespace: str) -> list[str]:
    """The names `namespace.__all__` lists, in its order."""
    module = namespace_module(package, namespace)
    if module.exports is None:
        raise ValueError(f"{namespace} has no __all__: the reference lists only exported names")
    return [name if isinstance(name, str) else name.name for name in module.exports]


def undocumented(package: griffe.Module) -> list[str]:
    """`namespace.name (file:line)` for every exported name whose docstring is empty."""
    missing = []
    for namespace in NAMESPACES:
        module = namespace_module(package, namespace)
        for name in exports(package, namespace):
            member = module[name]
            target = member.final_target if member.is_alias else member
            if target.docstring is None or not target.docstring.value.strip():
                where = f"{target.relative_filepath}:{target.lineno}"
                missing.append(f"{namespace}.{name} ({where})")
    return missing


def page(package: griffe.Module, namespace: str) -> str:
    """The Markdown of one namespace's reference page (mkdocstrings renders the `:::`)."""
    members = "".join(f"        - {name}\n" for name in exports(package, namespace))
    return (
        f"# `{namespace}`\n\n"
        f"::: {namespace}\n"
        "    options:\n"
        "      show_root_heading: false\n"
        "      members:\n"
        f"{members}"
    )
