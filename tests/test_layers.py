"""The house has layers that only look down: no module imports one of a higher layer.

Read from the source (every `import`, at module level, under `TYPE_CHECKING` or inside a
function), so the rule stays true as the code grows. The layers are those of
`shared/design/layout.md`; a package may use itself and anything below it, never a
sibling of its own layer or anything above. Within a package, modules import each other
in one direction only: no two modules (or more, around a circle) import each other.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "agentfsm"

#: Top-level part of `agentfsm` -> its layer (1 is the ground).
LAYERS: dict[str, int] = {
    "_extras": 1,
    "errors": 1,
    "names": 1,
    "events": 2,
    "ledger": 2,
    "fsm": 3,
    "record": 3,
    "_log": 3,
    "guards": 4,
    "reducers": 5,
    "stores": 6,
    "diagrams": 6,
    "runtime": 7,
    "testing": 7,
    "adapters": 8,
    # The web UI reads stores, draws diagrams and steers runs (runtime.control), like the CLI
    # it sits beside; the CLI's `ui` and `report` commands serve it, so the CLI is above it.
    "ui": 8,
    "cli": 9,
    "__init__": 10,
    "__main__": 10,
}


def _part(module: str) -> str | None:
    """The top-level part of `agentfsm.x.y` (`x`), or None for another package."""
    names = module.split(".")
    if names[0] != "agentfsm":
        return None
    return names[1] if len(names) > 1 else "__init__"


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) for every agentfsm module the file imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return [(line, m) for line, m in found if m.startswith("agentfsm")]


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_every_part_has_a_layer() -> None:
    """A new top-level module or package is placed on purpose, not by accident."""
    parts = {p.relative_to(PACKAGE).parts[0].removesuffix(".py") for p in _sources()}
    assert sorted(parts - set(LAYERS)) == []


@pytest.mark.parametrize("path", _sources(), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_look_down(path: Path) -> None:
    """Each import names its own part or a part of a lower layer."""
    own = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
    upward = []
    for line, module in _imports(path):
        part = _part(module)
        if part is None or part == own:
            continue
        if LAYERS[part] >= LAYERS[own]:
            upward.append(f"line {line}: {module} (layer {LAYERS[part]} >= {LAYERS[own]})")
    assert upward == []


#: Import circles known and being removed, each with who removes it. A circle listed here
#: is still reported by `farm-studio look`; it is allowed only so that this check can
#: refuse every other one meanwhile. Drop the entry with the circle.
KNOWN_CIRCLES: list[list[str]] = []


def _module_name(path: Path) -> str:
    names = ["agentfsm", *path.relative_to(PACKAGE).with_suffix("").parts]
    return ".".join(names[:-1] if names[-1] == "__init__" else names)


def _imported_modules(path: Path, modules: set[str]) -> set[str]:
    """The package's modules `path` imports: `from a import b` names `a.b` if that is a
    module (importing a submodule), else `a` (importing a name from it)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in modules else node.module)
    return found & modules


def _graph() -> dict[str, list[str]]:
    """Each module of the package -> the package's modules it imports."""
    paths = {_module_name(p): p for p in _sources()}
    return {m: sorted(_imported_modules(p, set(paths)) - {m}) for m, p in paths.items()}


def _circles(graph: dict[str, list[str]]) -> list[list[str]]:
    """Each set of modules that import each other round a circle (Tarjan's strongly
    connected components of more than one module), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for other in graph[module]:
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in on_stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == module:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return sorted(found)


def test_no_modules_import_each_other() -> None:
    """No import circle inside the package, beyond the known ones listed above."""
    assert [c for c in _circles(_graph()) if c not in KNOWN_CIRCLES] == []


def test_the_circle_check_finds_circles_of_any_length() -> None:
    """Two modules importing each other, and three round a circle, are found; a chain is not."""
    graph = {
        "a": ["b"],
        "b": ["a", "c"],
        "c": ["d"],
        "d": ["e"],
        "e": ["c"],
        "f": ["a"],
    }
    assert _circles(graph) == [["a", "b"], ["c", "d", "e"]]


def test_a_submodule_import_is_read_as_an_import_of_that_module() -> None:
    """`from agentfsm.runtime import _plan` imports `_plan`, not the package's `__init__`."""
    graph = _graph()
    assert "agentfsm.runtime._plan" in graph["agentfsm.runtime._drive"]
    assert "agentfsm.runtime" not in graph["agentfsm.runtime._drive"]


#: The testing kit's groups (tests/test_public_api.py pins what it exports): each package of
#: `agentfsm/testing/` and each module beside them is a group of its own.
TESTING = PACKAGE / "testing"


def _testing_group(module: str) -> str | None:
    """The group of `agentfsm.testing.x...` (`x`), "" for the front door, None outside."""
    names = module.split(".")
    if names[:2] != ["agentfsm", "testing"]:
        return None
    return names[2] if len(names) > 2 else ""


@pytest.mark.parametrize(
    "path", sorted(TESTING.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_testing_kits_groups_import_only_themselves(path: Path) -> None:
    """`_runs`, `_stores`, `fixtures`, the assertions, the promises and the plugin import
    nothing of each other (nor the front door, which gathers them)."""
    own = _testing_group(_module_name(path))
    if own == "":
        return
    crossing = [
        f"line {line}: {module}"
        for line, module in _imports(path)
        if _testing_group(module) not in (None, own)
    ]
    assert crossing == []


def _private_names(path: Path, modules: set[str]) -> list[str]:
    """`line: module.name` for each underscore name (not a module) the file imports."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found += [
                f"line {node.lineno}: {node.module}.{alias.name}"
                for alias in node.names
                if alias.name.startswith("_") and f"{node.module}.{alias.name}" not in modules
            ]
    return found


@pytest.mark.parametrize(
    "path", sorted(TESTING.rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_testing_kit_imports_no_private_name(path: Path) -> None:
    """A module of the kit uses another's names from its `__all__` only: what several modules
    share is named as shared, not reached for behind an underscore."""
    modules = {_module_name(p) for p in _sources()}
    assert _private_names(path, modules) == []


def test_the_private_name_check_finds_one(tmp_path: Path) -> None:
    """`from m import _x` is found; importing a private module (`from p import _m`) is not."""
    source = tmp_path / "user.py"
    source.write_text(
        "from agentfsm.testing.fixtures import _claude_frames\n"
        "from agentfsm.testing._runs.values import _opt, payloads\n",
        encoding="utf-8",
    )
    modules = {_module_name(p) for p in _sources()}
    assert _private_names(source, modules) == ["line 2: agentfsm.testing._runs.values._opt"]
