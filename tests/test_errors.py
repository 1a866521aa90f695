"""One exception tree: every error agentfsm raises is an `AgentFSMError`, drawn in one place.

The drawing in `agentfsm.errors`' docstring (which the API reference shows) is read back and
held to the classes: every exception class the package defines is in it, under the parent it
really has, with the builtin base it really keeps; nothing is drawn that does not exist.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import agentfsm
import agentfsm.errors
from agentfsm.errors import AgentFSMError

#: Signals agentfsm raises and catches inside itself, which never reach a caller: they are not
#: errors of the library and are not drawn. Each says where it is caught.
INTERNAL = {
    # Raised through an SDK's own code and caught again around it by the adapter.
    "agentfsm.adapters._sdk_stops.GuardStop": "caught around the SDK run; the run terminates",
    "agentfsm.adapters._sdk_stops.CancelStop": "caught around the SDK run; the run is cancelled",
    "agentfsm.adapters._sdk_stops.WaitStop": "a CancelStop; the run stays where it waits",
    "agentfsm.adapters._openai_agents_hooks._Stopped": "an AgentsException the hooks catch",
    # The drive core's and the engine's own control flow.
    "agentfsm.runtime._calls._RetryLater": "caught in the core, returned as `Later`",
    "agentfsm.runtime._calls._ChildWaiting": "caught in the core, returned as `Waiting`",
    "agentfsm.runtime._writer.StateChanged": "caught by the drive loop, which re-decides",
    "agentfsm.runtime.procrastinate._HandBack": "caught between the job's steps",
    "agentfsm.runtime.procrastinate._SliceOver": "caught in the job when its slice is over",
    "agentfsm.stores.lease._Reentered": "caught inside `take_lease`",
    "agentfsm.events._bounds._Bad": "caught inside the bounds walk",
    # The command line and the web UI turn these into an exit status or an HTTP page.
    "agentfsm.cli._common.UsageError": "`agentfsm.cli.main` prints it and exits 2",
    "agentfsm.cli.control.DecisionRefusedError": "a steering command prints it and exits 1",
    "agentfsm.ui.app._RefusedError": "the UI answers with a 409 page",
}


def _exception_classes() -> dict[str, type[BaseException]]:
    """`module.Class` -> class, for every exception class a module of the package defines."""
    found: dict[str, type[BaseException]] = {}
    for info in pkgutil.walk_packages(agentfsm.__path__, "agentfsm."):
        if info.name.endswith("__main__"):  # importing it runs the command line
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == info.name
            ):
                found[f"{value.__module__}.{value.__qualname__}"] = value
    return found


CLASSES = _exception_classes()
ERRORS = {name: cls for name, cls in CLASSES.items() if name not in INTERNAL}

#: A line of the drawing: its tree prefix, the class, an optional base in parentheses, and an
#: optional `[namespace]` (under `agentfsm.`) that defines it when it is not `agentfsm.errors`.
_LINE = re.compile(
    r"^(?P<prefix>(?:[│ ]   )*)(?:[├└]── )?(?P<name>[A-Z]\w+)(?: \((?P<base>\w+)\))?"
    r"(?:\s.*?)?(?:\[(?P<home>[\w.]+)\])?\s*$"
)


def _drawing() -> dict[str, tuple[str | None, str | None, str | None]]:
    """Each drawn class -> (its parent, the base in parentheses, the namespace marked)."""
    doc = agentfsm.errors.__doc__ or ""
    block = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]
    drawn: dict[str, tuple[str | None, str | None, str | None]] = {}
    parents: list[str] = []
    for raw in block.splitlines():
        line = raw.removeprefix("    ")
        match = _LINE.match(line)
        assert match, f"cannot read the drawing's line {raw!r}"
        depth = len(match["prefix"]) // 4 + (0 if line.startswith(match["name"]) else 1)
        del parents[depth:]
        parent = parents[-1] if parents else None
        drawn[match["name"]] = (parent, match["base"], match["home"])
        parents.append(match["name"])
    return drawn


DRAWN = _drawing()


def test_every_internal_signal_still_exists() -> None:
    """The exempt list names classes that are there (a stale entry would exempt nothing)."""
    assert sorted(set(INTERNAL) - set(CLASSES)) == []


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_every_error_is_an_agentfsm_error(name: str) -> None:
    """Catching `AgentFSMError` catches everything agentfsm raises on purpose."""
    assert issubclass(ERRORS[name], AgentFSMError)


def test_the_drawing_has_every_error_and_nothing_else() -> None:
    """No error is left out of the one drawing, and none is drawn that does not exist."""
    defined = sorted(cls.__name__ for cls in ERRORS.values())
    assert len(defined) == len(set(defined)), "two errors share a name"
    assert sorted(DRAWN) == defined


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_each_error_is_drawn_under_its_real_parent(name: str) -> None:
    """The drawing is true: parent, builtin base and defining namespace are the class's own."""
    cls = ERRORS[name]
    parent, base, home = DRAWN[cls.__name__]
    ours = [b for b in cls.__bases__ if issubclass(b, AgentFSMError)]
    others = [b.__name__ for b in cls.__bases__ if not issubclass(b, AgentFSMError)]
    if cls is AgentFSMError:
        assert (parent, base) == (None, None)
    else:
        assert [b.__name__ for b in ours] == [parent]
        assert others == ([base] if base else [])
    if home is None:
        assert cls.__module__ == "agentfsm.errors"
    else:
        namespace = importlib.import_module(f"agentfsm.{home}")
        assert cls.__name__ in namespace.__all__
        assert getattr(namespace, cls.__name__) is cls


def test_the_errors_module_exports_every_error_it_defines() -> None:
    """`agentfsm.errors.__all__` is the set of errors defined there."""
    here = sorted(c.__name__ for c in ERRORS.values() if c.__module__ == "agentfsm.errors")
    assert sorted(agentfsm.errors.__all__) == here


def test_no_other_module_draws_a_tree_of_errors() -> None:
    """One drawing: a second one, of a part of the tree, would drift from it."""
    package = Path(agentfsm.__file__).resolve().parent
    drawings = [
        str(path.relative_to(package))
        for path in sorted(package.rglob("*.py"))
        if path.name != "errors.py"
        and re.search(r"AgentFSMError\n\s+[│ ]*[├└]──", path.read_text(encoding="utf-8"))
    ]
    assert drawings == []


def test_the_unknown_table_message_names_the_registrys_entry_point_group() -> None:
    """The error says where to publish a table; the registry reads from that very group."""
    from agentfsm.events.models import TableRef
    from agentfsm.fsm.registry import ENTRY_POINT_GROUP

    error = agentfsm.errors.UnknownTableError(TableRef(name="t", digest="sha256:" + "0" * 64), [])
    assert f"'{ENTRY_POINT_GROUP}' entry point group" in str(error)
    assert isinstance(error, LookupError)
