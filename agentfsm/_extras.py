"""The error for a missing optional dependency: it names the extra that installs it.

A module that needs an extra imports its third-party packages first, inside `try`, and
raises `missing_extra(...) from exc`: `ImportError: PostgresEventStore needs the 'postgres'
extra: pip install 'agentfsm[postgres]'`, chained from the original error (which says which
package was missing). At the ground of the layers: it imports nothing of ours.
"""

from __future__ import annotations

__all__ = ["missing_extra"]


def missing_extra(what: str, extra: str, error: ImportError, hint: str = "") -> ImportError:
    """The ImportError to raise (`from error`) when `what` cannot import its `extra`.

    Args:
        what: what the user asked for, as they would write it (`PostgresEventStore`).
        extra: the extra's name in `pyproject.toml` (`postgres`).
        error: the original ImportError; its `name` (the missing module) is kept.
        hint: an alternative that needs no extra, appended in parentheses.
    """
    message = f"{what} needs the '{extra}' extra: pip install 'agentfsm[{extra}]'"
    if hint:
        message += f" ({hint})"
    return ImportError(message, name=error.name)
