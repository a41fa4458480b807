"""The pure tests of tests/live/test_terminal_view_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import re

from vllmdiag.render.fleet_view import CELL_STYLE


def test_a_ring_names_the_reader_it_waits_on_in_words() -> None:
    """Issue 26: the terminal said "waits on the framed reader", a frame only the HTML draws."""
    from vllmdiag.render.compact import _bar
    from vllmdiag.render.report_data import RingView

    ring = RingView("psm_1", "rpc", "EngineCore", ["TP0", "TP1", "TP2", "TP3"], [0, 0, 10, 0], 10, {2}, [], "FULL still")
    text = re.sub(r"\[/?[a-z ]*\]", "", _bar(ring))
    assert text.endswith("◀ waits on TP2") and "framed" not in text, text


def test_fleet_legend_reads_without_colour() -> None:
    glyphs = [glyph for glyph, _ in CELL_STYLE.values()]
    assert len(set(glyphs)) == len(glyphs), "one glyph per state, not one glyph in several colours"
