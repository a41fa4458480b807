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


def _view(now: float, verdict: dict) -> object:
    from vllmdiag.watch.health import View

    t = Tracked("vm:1@1", "vm:1", 1, last_progress=0.0, state="stalled", stalls=1, verdict=verdict)
    t.confirmed_at, t.saved_at, t.evidence = 10.0, 10.5, "/tmp/x.json"
    return View([t], passes=5, last_seen=now, started=0.0, gone={}, now=now, wall=1e9, gone_grace_s=300.0)


PART_GONE = {"status": "blocked", "layer": "process",
             "culprits": [{"role": "engine_core", "pid": None, "rank": None, "title": "VLLM::EngineCore"}]}
HUNG = {"status": "blocked", "layer": "gpu", "culprits": [{"role": "worker", "pid": 7, "rank": 0, "title": "w"}]}


def test_a_deployment_half_gone_fails_liveness_only_past_the_gone_grace() -> None:
    """The real server's restart under load read once as 'EngineCore missing' (blocked/process) before the next
    pass found it gone: a restart in progress, never a 503 until it stays so past --gone-grace."""
    from vllmdiag.watch.health import livez

    assert livez(_view(12.0, PART_GONE)).code == 200  # type: ignore[arg-type]
    assert livez(_view(400.0, PART_GONE)).code == 503  # type: ignore[arg-type]
    assert livez(_view(12.0, HUNG)).code == 503  # type: ignore[arg-type]
