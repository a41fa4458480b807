"""The pure tests of tests/live/test_fleet_tree_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import pytest

from fleet_fixtures import skip_reason

pytestmark = [pytest.mark.root, pytest.mark.skipif(skip_reason() is not None, reason=skip_reason() or "")]


def test_the_human_view_reports_per_node_timing() -> None:
    from vllmdiag.render.fleet_view import timing_line

    nodes = [{"name": f"n{i}", "duration_s": d} for i, d in enumerate([1.0, 4.5, 1.2, 0.9, 2.0])]
    line = timing_line(nodes)
    assert line is not None and "median 1.2 s" in line and line.index("n1 4.5 s") < line.index("n4 2.0 s")
    assert timing_line(nodes[:1]) is None
