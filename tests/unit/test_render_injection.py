"""Hostile strings in a snapshot never reach a terminal as control sequences, never render as rich
markup, and never land as raw HTML in a report file (issue 15, item 8).

A real vLLM 0.33 snapshot is made hostile the way an attacker on the node could: process titles
(setproctitle), the node name, the ZMTP Socket-Type a fake listener sends, ring names and reasons.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

from vllmdiag.analysis.bisect import analyze
from vllmdiag.api import snapshots_from_json
from vllmdiag.render.files import to_html, to_markdown
from vllmdiag.render.safe import clean, md_escape
from vllmdiag.render.screen import render_report
from vllmdiag.render.text import make_console

REAL = Path(__file__).parent.parent / "data" / "vllm-real" / "snap-d-worker-tp1-sigstop.json"
EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[31mFAKE HEALTHY\x9b1m\r\u202e<script>alert(1)</script>[bold red]MARKUP[/]|x"
CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]")


def hostile_snapshot() -> dict[str, Any]:
    snap = json.loads(REAL.read_text())
    snap["node"] = "node" + EVIL
    for p in snap["probes"]["processes"]["data"]["processes"]:
        p["title"] = str(p.get("title") or "") + EVIL
        p["cmdline"] = [str(p.get("title")), EVIL]
    for z in snap["probes"]["endpoints"]["data"]["zmtp"]:
        z["peer_socket_type"] = EVIL
        z["reason"] = EVIL
    for r in snap["probes"]["rings"]["data"].get("rings", []):
        r["last_method"] = EVIL
    for probe in snap["probes"].values():
        if probe.get("reason"):
            probe["reason"] = EVIL
    return snap


def _report() -> Any:
    return analyze(snapshots_from_json(hostile_snapshot(), "hostile"))


def test_rich_view_has_no_control_sequence_and_no_markup(reliability: Any) -> None:
    out = io.StringIO()
    render_report(_report(), make_console(out))  # a plain file: rich itself writes no ANSI codes
    text = out.getvalue()
    bad = CONTROL.findall(text.replace("\n", ""))
    reliability.case(write=bool(bad))
    assert not bad, sorted(set(bad))
    assert "\\x1b" in text  # shown, visibly escaped
    assert "[bold red]MARKUP[/]" in text  # the Socket-Type is text, not markup


def test_rich_view_on_a_terminal_emits_only_our_own_styles() -> None:
    """Even on a real terminal the only ESC sequences are rich's SGR styles, never OSC/clear/CR."""
    from rich.console import Console

    out = io.StringIO()
    render_report(_report(), Console(file=out, force_terminal=True, width=200))
    text = out.getvalue()
    stripped = re.sub(r"\x1b\[[0-9;]*m", "", text)
    assert not CONTROL.findall(stripped.replace("\n", ""))
    assert "\x1b]" not in text and "\x1b[2J" not in text and "\r" not in text


def test_markdown_report_has_no_raw_html_or_control_characters() -> None:
    md = to_markdown(_report())
    assert not CONTROL.findall(md.replace("\n", ""))
    assert "<script" not in md and "<" not in md.replace("&lt;", "")
    assert "&lt;script>" in md  # the tag cannot open; the > opens nothing and stays readable (issue 35 item 8)
    for line in md.splitlines():
        if line.startswith("| ") and "FAKE" in line:
            assert line.count(" | ") == line.replace("\\|", "").count(" | ")  # no extra cell from a "|"


def test_html_report_escapes_everything() -> None:
    page = to_html(_report())
    assert not CONTROL.findall(page.replace("\n", ""))
    assert "<script>alert" not in page and "&lt;script&gt;" in page


def test_clean_and_md_escape_units() -> None:
    assert clean("a\x1b[31mb\x07\u202ec\nd") == "a\\x1b[31mb\\x07\\u202ec\\x0ad"
    assert clean(42) == "42"
    # Only what Markdown would act on is escaped (issue 35 item 8): the tag's <, the link's "](", the cell's |.
    assert md_escape("<b>[x](javascript:1)|") == "&lt;b>[x]\\(javascript:1)\\|"
