"""Untrusted text meets the renderers here, and only here (issue 15, item 8).

Process titles, node names, ZMTP Socket-Types, remote reasons and every other string in a report can
be chosen by whoever runs a process on the node. Before any renderer sees a report, `sanitize_report`
makes a copy in which every string has its control characters (ESC, BEL, CR, C1 controls, bidi
overrides) replaced by a visible escape, so nothing reaches the terminal as a control sequence and no
line can be forged. The rich views still escape markup (`escape`), the HTML file escapes with
`html.escape`, and the Markdown file gets a copy whose strings went through `md_escape` too.
"""

from __future__ import annotations

import copy
import dataclasses
import re
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
MAX_DEPTH = 64  # hostile snapshots can nest deeper; below this everything is shown as a placeholder
# C0 (newline and tab too: one field must stay one line), DEL, C1, zero-width and bidi controls
# (a U+202E in a title reverses what the reader sees), line/paragraph separators, BOM.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
_MD_BACKSLASH = re.compile(r"\\(?=[!-/:-@\[-`{-~])")  # a backslash before ASCII punctuation
_MD_ALWAYS = re.compile(r"([`*|])")
_MD_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")
_MD_OPENS = re.compile(r"(?<![A-Za-z0-9])_(?=\S)")  # an underscore that could open emphasis
_MD_CLOSES = re.compile(r"(?<=\S)_(?![A-Za-z0-9])")  # ... and one that could close it
_MD_EDGE_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")
_MD_BLOCK_START = re.compile(r"^(\s*)([#>+=\[-]|\d+(?=[.)]))")


def clean(value: Any) -> str:
    """str(value) with every control character replaced by its visible escape (ESC -> \\x1b)."""
    text = value if isinstance(value, str) else _str(value)
    return _CONTROL.sub(_visible, text) if _CONTROL.search(text) else text


def md_escape(value: Any, line_start: bool = True) -> str:
    """Clean, then escape for Markdown only what Markdown would act on where it stands, so the text still
    reads as plain text in a ticket (`TP[0-6]`, `all_reduce`, `a-b`, `x>0` as they are; issue 35 item 8):
    `<` (HTML, autolinks) and an entity-like `&`; a link's `](`; `*`, backticks, `|` (table cells), `~~`
    and backslashes; `_` at a word's edge (inside a word it is no emphasis); a block marker at the start
    (`#`, `>`, `-`, `+`, `1.`) unless `line_start` is False (a value after other text on its line)."""
    text = _MD_BACKSLASH.sub(r"\\\\", clean(value))  # only where Markdown reads it as an escape
    text = _MD_ENTITY.sub("&amp;", text).replace("<", "&lt;")
    text = _MD_ALWAYS.sub(r"\\\1", text).replace("](", "]\\(").replace("~~", "\\~\\~")
    if _MD_OPENS.search(text) and _MD_CLOSES.search(text):  # `_a_` emphasises; `_prepare_inputs` alone does not
        text = _MD_EDGE_UNDERSCORE.sub(r"\\_", text)
    return _MD_BLOCK_START.sub(_block_marker, text) if line_start else text


def _block_marker(m: re.Match[str]) -> str:
    """`# x` -> `\\# x`; `12. x` -> `12\\. x` (a backslash escapes punctuation, not a digit)."""
    mark = m.group(2)
    return m.group(1) + (mark + "\\" if mark[0].isdigit() else "\\" + mark)


def sanitize_report(report: T, escape: Callable[[Any], str] = clean) -> T:
    """A copy of the report (dataclasses, dicts, lists) with every string passed through `escape`.

    Dict keys are only cleaned (renderers look values up by key); the original is left untouched, so
    --save and --json still write the raw data (JSON escapes control characters itself)."""
    return _walk(report, escape, 0)


def _walk(obj: Any, escape: Callable[[Any], str], depth: int) -> Any:
    if isinstance(obj, str):
        return escape(obj)
    if obj is None or isinstance(obj, (bool, int, float)):
        return obj
    if depth > MAX_DEPTH:
        return "(nested too deep)"
    if isinstance(obj, dict):
        return {(clean(k) if isinstance(k, str) else k): _walk(v, escape, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_walk(v, escape, depth + 1) for v in obj] if isinstance(obj, list) else \
            tuple(_walk(v, escape, depth + 1) for v in obj)
    if isinstance(obj, (set, frozenset)):
        return {_walk(v, escape, depth + 1) for v in obj}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        new = copy.copy(obj)
        for f in dataclasses.fields(obj):
            object.__setattr__(new, f.name, _walk(getattr(obj, f.name), escape, depth + 1))
        return new
    return obj


def _visible(m: re.Match[str]) -> str:
    ch = m.group(0)
    return f"\\x{ord(ch):02x}" if ord(ch) < 0x100 else f"\\u{ord(ch):04x}"


def _str(value: Any) -> str:
    try:
        return str(value)
    except Exception:  # a hostile __str__ cannot happen with JSON input, but rendering must not fail
        return f"<{type(value).__name__}>"
