"""One HTML section per layer of one node, in bisection order, evidence drawn where people look. Each
section's body is drawn by its view (``render/<layer>_view.py``: ``html(node)``); the helpers here are shared.

Every string from the report (titles, paths, frames, messages: all untrusted) goes through `h()`.
"""

from __future__ import annotations

from html import escape

from vllmdiag.render import report_data as rd
from vllmdiag.render import views
from vllmdiag.render.safe import clean


def h(value: object) -> str:
    """Control characters made visible (an ANSI escape must not survive into a file), HTML-escaped."""
    return escape(clean("" if value is None else value), quote=True)


def h_lines(items: list[str]) -> str:
    """One line per item, for a <pre> block of commands: each is escaped on its own, since h() turns a
    newline inside a string into a visible \\x0a (a title cannot forge a line) and would do the same to
    the newlines that separate the commands."""
    return "\n".join(h(s) for s in items)


def tag(text: str, kind: str) -> str:
    return f"<span class='tag {h(kind)}'>{h(text)}</span>"


def layer_sections(node: rd.NodeData, anchor: str, layer: str | None) -> str:
    """One section per view that draws HTML (``<name>_view.py`` with ``html(node)``, render/views.py), in
    the views' order: the layers' in bisection order, then the others by name."""
    parts = []
    for name, build in views.drawing("html"):
        body = build(node)
        mark = " " + tag("blocked here", "blocked") if name == layer else ""
        parts.append(f"<section id='{h(anchor)}-{name}' data-layer='{name}'><h3>{name}{mark}</h3>"
                     f"{body or '<p class=muted>nothing to show for this layer</p>'}</section>")
    return "\n".join(parts)
