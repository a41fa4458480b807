"""Plain-function API behind ``vllmdiag sweep``: sweep, confirm, analyse, save. No printing, no exit codes."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet
from vllmdiag.analysis.across_nodes.second_look_nodes import CONFIRM_PROBES, merge_resample, nodes_to_confirm
from vllmdiag.api import NODES_FILE, TriageResult
from vllmdiag.model import strict_json
from vllmdiag.sweep.fanout import Progress, SweepPlan, run_sweep
from vllmdiag.sweep.node_steps import via_transport
from vllmdiag.sweep.outcome import NodeOutcome

MIN_CONFIRM_S = 2.0


@dataclass
class FleetResult(TriageResult):
    outcomes: list[NodeOutcome] = field(default_factory=list)
    wall_s: float = 0.0


def sweep(plan: SweepPlan, progress: Progress | None = None, confirm: bool = True) -> FleetResult:
    """Collect every node, confirm cross-node odd ranks with a second sample, analyse the fleet."""
    start = time.monotonic()
    outcomes = run_sweep(plan, progress)
    snaps = {o.name: o.snapshot for o in outcomes if o.snapshot is not None}
    report = analyze_fleet(list(snaps.values()), outcomes)
    left = plan.left_s()
    todo = [n for n in nodes_to_confirm(report) if n in snaps] if confirm else []
    if todo and left >= MIN_CONFIRM_S:
        again_start = time.monotonic()
        second = run_sweep(replace(plan, nodes=todo, transport=replace(plan.transport, probes=CONFIRM_PROBES, confirm_s=0.0),
                                   sweep_timeout_s=left, started=again_start))
        after = time.monotonic() - again_start
        for o in second:
            if o.snapshot is not None:
                snaps[o.name] = merge_resample(snaps[o.name], o.snapshot, after)
        for o in outcomes:
            o.snapshot = snaps.get(o.name, o.snapshot)
        report = analyze_fleet([s for s in snaps.values() if s is not None], outcomes)
    report.verdict.next_steps = via_transport(report.verdict.next_steps, plan.transport)
    if plan.transport.exec_template:  # so a report's per-finding commands reach the nodes the same way
        report.exec_template = plan.transport.exec_template
    return FleetResult(report=report, outcomes=outcomes, wall_s=time.monotonic() - start)


def save(result: TriageResult, directory: Path) -> list[Path]:
    """One snapshot JSON per node (safe file names) plus the node statuses, for `vllmdiag analyze DIR`."""
    import os

    from vllmdiag.files.outfile import OutputError, open_dir, write_output

    try:  # made as it is walked, never through another user's symlink (vllmdiag.files.outfile)
        os.close(open_dir(str(directory), create=0o750))
    except OutputError as exc:
        raise OutputError(f"--save {directory}: {exc}") from None
    except OSError as exc:
        raise OutputError(f"--save {directory}: cannot create the directory: {exc.strerror or exc}") from None
    written: list[Path] = []
    used: set[str] = set()
    for snap in result.report.snapshots:
        stem = safe_stem(snap.node)
        while stem in used:
            stem += "_"
        used.add(stem)
        path = directory / f"{stem}.json"
        # Through vllmdiag.files.outfile: a planted symlink at <dir>/<node>.json is refused, never written through.
        write_output(path, strict_json.dumps(snap.to_dict(), default=str) + "\n", "--save")
        written.append(path)
    nodes = result.report.nodes or []
    write_output(directory / NODES_FILE, strict_json.dumps([{"name": n.name, "status": n.status, "reason": n.reason,
                                                      "duration_s": n.duration_s} for n in nodes]) + "\n", "--save")
    return written


def safe_stem(name: str) -> str:
    stem = re.sub(r"[^A-Za-z0-9_.+-]", "_", name)[:200].lstrip(".") or "node"
    return stem
