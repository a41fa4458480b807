"""Which processes the orchestrator looks at twice (vllmdiag/confirm.py): odd ranks plus one waiter per
group, a lone busy rank, DP/EP/PP/Ray group outliers, EngineCores busy while all their workers idle,
EngineCores compiling a grammar -- each a hang if it holds, normal in passing. Pure: the choice is
analysis, the second look is collection.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.deployments import find_deployments, role_of
from vllmdiag.analysis.gpu import compare_group, tp_groups
from vllmdiag.analysis.gpu_dp_world import resample_pids as dp_world_pids  # DP ranks split over deployments
from vllmdiag.analysis.gpu_groups import resample_pids as group_pids  # DP/EP/PP, Ray workers
from vllmdiag.analysis.gpu_lone import resample_pids as lone_pids
from vllmdiag.analysis.queue_grammar import resample_pids as grammar_pids  # an EngineCore compiling a grammar
from vllmdiag.analysis.stacks import StackClass, classify_snapshot
from vllmdiag.model import Snapshot
from vllmdiag.stack_classes import ENGINE_BUSY, IDLE


def resample_pids(snapshot: Snapshot) -> list[int]:
    """For the orchestrator's second stack look (vllmdiag/confirm.py): odd ranks plus one waiter per
    group, and EngineCores busy while all their workers idle -- a hang if it holds, normal in passing."""
    classes = classify_snapshot(snapshot)
    wanted = set(snapshot.options.get("pids") or [])
    deps = find_deployments(snapshot)
    pids = {pid for dep in deps if not wanted or dep.pids & wanted for pid in _resample_for(dep.processes, classes)}
    mine = set().union(*(d.pids for d in deps if not wanted or d.pids & wanted))
    pids |= set(grammar_pids(snapshot, [d for d in deps if not wanted or d.pids & wanted]))
    return sorted(pids | {p for p in dp_world_pids(snapshot, classes, deps) if p in mine})


def _resample_for(procs: list[dict[str, Any]], classes: dict[int, StackClass]) -> list[int]:
    pids: list[int] = []
    for members in tp_groups(procs).values():
        cmp = compare_group(members, classes)
        if cmp is not None:
            pids += [o.pid for o in cmp.odd if o.pid is not None] + [members[cmp.waiting[0]]["pid"]]
    pids += lone_pids(procs, classes)
    pids += group_pids(procs, classes)
    workers = [classes.get(p["pid"]) for p in procs if role_of(p) == "worker"]
    if workers and all(c is not None and c.name == IDLE for c in workers):
        pids += [p["pid"] for p in procs if (c := classes.get(p["pid"])) is not None and c.name == ENGINE_BUSY]
    return sorted(set(pids))
