"""The house has layers that only look down: no module imports one of a higher layer.

Read from the source (every `import`, at module level, under `TYPE_CHECKING` or inside a
function), so the rule stays true as the code grows. The layers are those of
`shared/design/layout.md`; a package may use itself and anything below it, never a
sibling of its own layer or anything above.
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
    "cli": 8,
    "__init__": 9,
    "__main__": 9,
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
