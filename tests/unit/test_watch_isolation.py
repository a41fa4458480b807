"""The resident watcher bounds itself (issue 25 item 4): each pass runs in a forked child killed at the
pass budget, with RLIMITs on its memory, CPU seconds and fds, so a probe that runs away (a hostile
/metrics once made one grow ~5 MB/s with a core busy until the OOM killer ended the watcher) ends
that pass and never takes the watcher along."""

from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest

from vllmdiag.runtime import runner
from vllmdiag.watch.watcher import WatchConfig, Watcher

RUNAWAY_BYTES = 1200 << 20  # over the pass child's address-space allowance (PASS_MEMORY)


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) << 10
    return 0


def test_a_runaway_pass_ends_in_its_child_and_the_watcher_keeps_its_memory(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch,
                                                                          reliability: Any) -> None:
    def runaway(*_: Any, **__: Any) -> Any:
        hog: list[bytearray] = []
        end = time.monotonic() + 8.0
        try:
            while len(hog) * (32 << 20) < RUNAWAY_BYTES and time.monotonic() < end:
                hog.append(bytearray(32 << 20))  # touched pages: RSS, not only address space
        except MemoryError:
            raise
        while time.monotonic() < end:  # then a core busy, holding it all
            pass
        raise RuntimeError("runaway finished")

    monkeypatch.setattr(runner, "collect_snapshot", runaway)
    err = io.StringIO()
    cfg = WatchConfig(out_dir=tmp_path / "out", interval_s=1.0, pass_budget_s=1.0, max_passes=1,
                      out=io.StringIO(), err=err)
    watcher = Watcher(cfg)
    before = _rss()
    start = time.monotonic()
    watcher.step()
    wall = time.monotonic() - start
    grown = _rss() - before
    reliability.case(hang=wall > 4.0)
    assert wall < 4.0, f"a pass with a 1 s budget took {wall:.1f} s"
    assert grown < 200 << 20, f"the watcher grew by {grown >> 20} MB"
    assert "cheap pass incomplete" in err.getvalue() and "processes" in err.getvalue()
    snap = watcher.prev[0] if watcher.prev else None
    assert snap is not None and all(r.status in ("timeout", "error") for r in snap.probes.values())
