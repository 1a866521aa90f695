"""MkDocs hooks: the API reference generated from the docstrings, and strict about gaps.

`on_files` adds one page per public namespace (docsite/reference.py); it refuses to build,
listing each, when a public name has no docstring, so the reference cannot silently show an
empty entry (mkdocstrings renders those without a warning).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# The checkout is put on the path just above, so this import comes after it.
from docsite import reference

#: A Markdown link or image to a path above docs/: `](../diagrams/agent_run.png)`.
_OUTSIDE_LINK = re.compile(r"\]\(\.\./(?P<path>[^)#\s]+)(?P<rest>[^)]*)\)")
#: Where repository files linked from docs/ are copied into the site.
REPO_DIR = "repo"


def _linked_outside(config: Any) -> list[str]:
    """Repository paths outside docs/ that the pages link to (GitHub renders these links)."""
    docs = Path(config["docs_dir"])
    return sorted(
        {
            match["path"]
            for page in docs.glob("*.md")
            for match in _OUTSIDE_LINK.finditer(page.read_text(encoding="utf-8"))
        }
    )


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
    # A link from docs/ to a file of the repository (a picture, a benchmark) reads on GitHub;
    # in the site the file is copied under repo/ and the link pointed there. A path that is
    # not in the repository is not copied, so its link stays broken and fails the build.
    for path in _linked_outside(config):
        source = reference.ROOT / path
        if source.is_file() and not source.is_relative_to(reference.ROOT / "docs"):
            files.append(File.generated(config, f"{REPO_DIR}/{path}", abs_src_path=str(source)))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Files) -> str:
    """Point the links of a top-level page to ../PATH at the copy under repo/."""
    if "/" in page.file.src_uri:
        return markdown
    return _OUTSIDE_LINK.sub(
        lambda match: f"]({REPO_DIR}/{match['path']}{match['rest']})", markdown
    )
