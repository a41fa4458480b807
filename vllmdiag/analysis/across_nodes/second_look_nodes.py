"""A second look for cross-node odd ranks: one stack sample can catch ranks in passing under load.

On one node the stacks probe resamples odd ranks itself; a rank that is odd only across nodes is
not odd to its own node's probe, so the sweep collects stacks once more on that group's nodes and
merges them into the first snapshots as the ``resample`` the single-node rules already read.
The merged snapshots are what ``--save`` writes, so ``vllmdiag analyze DIR`` reaches the same verdict.
"""

from __future__ import annotations

import copy
from typing import Any

from vllmdiag.model import Report, Snapshot

CONFIRM_CODES = ("fleet.rank_straggler", "fleet.collective_mismatch")
CONFIRM_PROBES = ("processes", "stacks")


def nodes_to_confirm(report: Report) -> list[str]:
    """Nodes of the groups whose cross-node odd rank was seen in one sample only."""
    out: set[str] = set()
    for f in report.findings:
        if f.code in CONFIRM_CODES and not f.confirmed_by_resample:
            out.update(f.nodes)
    return sorted(out)


def merge_resample(first: Snapshot, second: Snapshot, after_s: float) -> Snapshot:
    """``first`` with each dump's ``resample`` taken from ``second`` for the same process (pid and
    start time agree: a pid reused by a new process in between is not the same rank)."""
    starts = {p["pid"]: p.get("start_time") for p in first.data("processes").get("processes", [])}
    later = {p["pid"]: p.get("start_time") for p in second.data("processes").get("processes", [])}
    again: dict[int, dict[str, Any]] = {int(d["pid"]): d for d in second.data("stacks").get("dumps", [])
                                        if d.get("status") == "ok" and d.get("threads")}
    merged = copy.deepcopy(first)
    for dump in merged.data("stacks").get("dumps", []):
        pid = dump.get("pid")
        if pid in again and pid in later and later[pid] == starts.get(pid) and not dump.get("resample"):
            dump["resample"] = {"after_s": round(after_s, 3), "status": "ok", "reason": "fleet confirmation sweep",
                                "threads": again[pid]["threads"]}
    return merged
