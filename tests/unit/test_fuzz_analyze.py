"""Untrusted snapshots: analysis either answers or says the input is bad; it never crashes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllmdiag.analysis.bisect import analyze
from vllmdiag.api import snapshots_from_json
from vllmdiag.model import SnapshotError

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4),
    max_leaves=20)

PROC_KEYS = ["pid", "ppid", "pgid", "role", "ranks", "state", "title", "comm", "cmdline", "titled", "environ",
             "threads", "num_fds", "rlimit_nofile"]
PROBES = ["processes", "shm", "sockets", "rings", "stacks", "nvml", "endpoints", "http", "host"]


def _analyze_raw(raw: Any) -> None:
    try:
        snaps = snapshots_from_json(raw, "fuzz")
        analyze(snaps)
    except SnapshotError:
        pass


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(JSONISH)
def test_any_json_value(raw: Any) -> None:
    _analyze_raw(raw)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(probe=st.sampled_from(PROBES), payload=JSONISH,
       procs=st.lists(st.fixed_dictionaries({}, optional={k: JSONISH for k in PROC_KEYS}), max_size=5))
def test_corrupted_probe_data(probe: str, payload: Any, procs: list[dict[str, Any]]) -> None:
    snap = {"schema_version": 1, "node": "n", "collected_at": "", "vllmdiag_version": "x", "duration_s": 1,
            "probes": {"processes": {"status": "ok", "duration_s": 0, "data": {"processes": procs}},
                       probe: {"status": "ok", "duration_s": 0,
                               "data": payload if isinstance(payload, dict) else {"x": payload}}}}
    _analyze_raw(snap)


def test_corrupted_real_snapshot(tmp_path: Path) -> None:
    """Flip parts of a real snapshot taken on this machine."""
    from vllmdiag.api import collect

    base = collect(budget_s=5).to_dict()
    text = json.dumps(base)
    for i in range(0, len(text), max(1, len(text) // 200)):
        mutated = text[:i] + text[i + 1:]
        try:
            raw = json.loads(mutated)
        except json.JSONDecodeError:
            continue
        _analyze_raw(raw)
