"""A watcher's suspect is a stall only when the confirming triage says so (issue 34): a triage that found the
deployment gone meanwhile (no-deployment) or could not see (inconclusive) confirms nothing. CI's README watch
once recorded "watch saw deployment X stall ...: no-deployment" as the sim went down, and every later triage
on the node repeated it."""

from __future__ import annotations

import pytest

from vllmdiag.watch.state import Tracked, Tracker


@pytest.mark.parametrize("status", ["no-deployment", "inconclusive"])
def test_gone_or_blind_is_not_a_confirmed_stall(status: str) -> None:
    t = Tracked("vm:1@1", "vm:1", 1, last_progress=0.0, state="suspect")
    assert Tracker().confirmed(t, {"status": status}, now=10.0, wall=1000.0) is False
    assert t.state == "suspect" and t.stalls == 0


def test_a_blocked_triage_is_a_stall() -> None:
    t = Tracked("vm:1@1", "vm:1", 1, last_progress=0.0, state="suspect")
    assert Tracker().confirmed(t, {"status": "blocked", "layer": "gpu"}, now=10.0, wall=1000.0) is True
    assert t.state == "stalled" and t.stalls == 1
