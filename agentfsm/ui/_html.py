"""The rows a page draws a hundred of, written here rather than in a template.

A timeline page is 100 event rows; drawn by Jinja each row cost ~0.12 ms in attribute
lookups, filters and URL building, most of a first view of a run's page (issue 32). These
functions write the same markup as the template did, byte for byte, escaping every value
with markupsafe as autoescaping does; each page's links are built once, not once a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from markupsafe import Markup, escape

__all__ = ["timeline_rows"]


def timeline_rows(
    rows: Sequence[dict[str, Any]], run_id: str, at: int | None, stepping: bool, whole_table: bool
) -> Markup:
    """The `<tr>` of each timeline row of a turn group (see `_pages._timeline` for a row's
    keys; `json` is its fields as `pretty_json` writes them): its sequence linked to the
    step at it (keeping the whole-table view), its type, the move it made, its time, and
    its fields (with a link to the whole event when cut)."""
    run = urlencode([("id", run_id)])
    step = f"/run?{run}&at="
    view = "&view=table" if whole_table else ""
    out: list[str] = []
    for t in rows:
        seq = t["sequence"]
        here = "at" if seq == at and stepping else ""
        action = t["action_id"] or ""
        move = t["move"]
        if move:
            shown = f"<code>{escape(move.source)}</code> → <code>{escape(move.target)}</code>"
            if move.condition:
                shown += f' <span class="muted">[{escape(move.condition)}]</span>'
        else:
            shown = ""
        when = escape(t["occurred_at"])
        fields = t["fields"]
        if fields:
            cell = (
                f'<details class="fields"><summary>{len(fields)} field(s)</summary>'
                f'<pre class="fields">{escape(t["json"])}</pre></details>'
            )
            if t["cut"]:
                whole = escape(f"/run/event.json?{urlencode([('id', run_id), ('seq', seq)])}")
                cell += f'<a href="{whole}">whole event</a>'
        else:
            cell = ""
        out.append(
            f'\n    <tr class="{here}" data-seq="{seq}" data-type="{escape(t["type"])}"'
            f' data-action="{escape(action)}">\n'
            f'      <td class="num"><a href="{escape(f"{step}{seq}{view}")}#step">{seq}</a></td>\n'
            f"      <td><code>{escape(t['type'])}</code></td>\n"
            f"      <td>{shown}</td>\n"
            f'      <td class="time"><time datetime="{when}" title="{when}">'
            f"{escape(t['relative'] or t['occurred_at'])}</time></td>\n"
            f"      <td>{cell}</td>\n"
            "    </tr>\n    "
        )
    return Markup("".join(out))  # noqa: S704 - every value above is escaped
