"""The pure tests of tests/live/test_watch_blind_live.py, which says what they check: these start nothing."""

from __future__ import annotations

from vllmdiag.analysis.views.progress import Progress
from vllmdiag.watch.state import Tracker


def test_blind_pass_is_unknown_never_idle_and_seen_moving_is_running() -> None:
    tr = Tracker()
    seen = {"n:1@1.0": ("n:1", 1)}
    idle = Progress("n:1", False, False)
    kinds = [e.kind for e in tr.observe(seen, {"n:1": idle}, {}, 0, None, {"n:1": "probe rings could not read"})]
    t = tr.deps["n:1@1.0"]
    assert kinds == ["new", "unknown"] and t.state == "unknown" and "rings" in t.blind
    assert [e.kind for e in tr.observe(seen, {"n:1": idle}, {}, 1, 0, {"n:1": "probe rings could not read"})] == []
    moving = Progress("n:1", True, True, moved_what=["tokens"])
    tr.observe(seen, {"n:1": moving}, {}, 2, 1, {"n:1": "probe rings could not read"})
    assert t.state == "running" and t.blind == ""  # what was seen moving moved
