"""MkDocs hooks: the API reference generated from the docstrings, and strict about gaps.

`on_files` adds one page per public namespace (docsite/reference.py); it refuses to build,
listing each, when a public name has no docstring, so the reference cannot silently show an
empty entry (mkdocstrings renders those without a warning).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The checkout is put on the path just above, so this import comes after it.
from docsite import reference


def on_files(files: Files, config: Any) -> Files:
    package = reference.load()
    missing = reference.undocumented(package)
    if missing:
        raise PluginError(
            f"{len(missing)} public name(s) without a docstring (a `#:` comment above a "
            "constant counts):\n  " + "\n  ".join(missing)
        )
    for namespace in reference.NAMESPACES:
        files.append(
            File.generated(
                config, f"reference/{namespace}.md", content=reference.page(package, namespace)
            )
        )
    return files
