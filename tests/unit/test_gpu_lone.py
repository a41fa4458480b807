"""A lone output rank stuck while its peers idle (seen on real vLLM 0.33: tests/data/vllm-real, scenario g)."""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from typing import Any

from vllmdiag.analysis.bisect import analyze
from vllmdiag.model import Snapshot

SNAP = Path(__file__).parent.parent / "data" / "vllm-real" / "snap-g-output-rank-stuck.json"


def _snapshot(second: str) -> Snapshot:
    """The real snapshot, plus the second stack sample the probe now takes of the lone rank:
    'same' (it did not move) or 'moved' (the peers' idle stack, as after the step finished)."""
    raw: dict[str, Any] = json.loads(SNAP.read_text())
    snap = Snapshot.from_dict(raw)
    procs = {p["pid"]: p for p in snap.data("processes")["processes"]}
    dumps = snap.data("stacks")["dumps"]
    tp0 = next(d for d in dumps if procs[d["pid"]].get("ranks", {}).get("tp") == 0)
    tp1 = next(d for d in dumps if procs[d["pid"]].get("ranks", {}).get("tp") == 1)
    threads = tp0["threads"] if second == "same" else tp1["threads"]
    tp0["resample"] = {"after_s": 0.3, "status": "ok", "reason": None, "threads": copy.deepcopy(threads)}
    return snap


def test_real_snapshot_without_second_sample_is_not_called_a_hang() -> None:
    # Nor healthy: a request runs and no ring moved in 0.5 s. Too short a look to block (issue 13).
    rep = analyze([Snapshot.from_dict(json.loads(SNAP.read_text()))])
    assert (rep.verdict.status, rep.verdict.layer) == ("degraded", "gpu"), rep.verdict.summary
    (suspected,) = [f for f in rep.findings if f.code == "gpu.stall_suspected"]
    assert suspected.evidence["needs_confirm"] and "seen for only 0.5 s" in suspected.message


def _held_over_a_window(seconds: float) -> Snapshot:
    """The 'same' snapshot plus a confirm-window pass ``seconds`` later that shows the very same picture."""
    snap = _snapshot("same")
    later = Snapshot.from_dict(json.loads(SNAP.read_text()))
    at = datetime.datetime.fromisoformat(snap.collected_at) + datetime.timedelta(seconds=seconds)
    later.collected_at = at.isoformat(timespec="milliseconds")
    snap.passes = [later]
    return snap


def test_lone_rank_held_over_one_resample_is_suspected_not_blocked() -> None:
    """0.3 s is one step on a loaded node (a CPU hog made a stalled client read "TP0 stays in
    _model_forward", blocked/gpu): named, but it asks for the confirm window."""
    rep = analyze([_snapshot("same")])
    v = rep.verdict
    assert (v.status, v.layer) == ("degraded", "gpu"), v.summary
    (alone,) = [f for f in rep.findings if f.code == "gpu.rank_stuck_alone"]
    assert alone.severity == "warning" and alone.evidence["needs_confirm"] is True and "seen for only" in alone.message
    assert (alone.culprits[0].title, alone.culprits[0].rank) == ("VLLM::Worker_TP0", 0)


def test_lone_rank_that_stays_over_the_confirm_window_is_the_culprit() -> None:
    v = analyze([_held_over_a_window(4.0)]).verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
    assert (v.culprits[0].title, v.culprits[0].rank) == ("VLLM::Worker_TP0", 0)


def test_lone_rank_that_moved_on_is_healthy() -> None:
    assert analyze([_snapshot("moved")]).verdict.status == "healthy"
