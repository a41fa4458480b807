"""The contract between the parts: ``Snapshot`` (what probes collect), ``Finding``/``Verdict`` (what
analysis concludes), ``Report`` (what render draws and ``--json`` prints). Pure data, no I/O; every
class round-trips through plain JSON (``from_dict(to_dict(x)) == x``)."""

from __future__ import annotations

from vllmdiag.model._check import SnapshotError
from vllmdiag.model.fleet import NODE_STATUSES, FleetSection, GridRow, GroupBrief, NodeClass, NodeEntry, NodeOutcome
from vllmdiag.model.report import REPORT_SCHEMA_VERSION, DeploymentReport, ProcessBrief, Report, RingView
from vllmdiag.model.snapshot import PROBE_STATUSES, SCHEMA_VERSION, ProbeResult, Snapshot
from vllmdiag.model.verdict import LAYERS, SEVERITIES, VERDICT_STATUSES, Culprit, Finding, Verdict

__all__ = [
    "LAYERS", "NODE_STATUSES", "PROBE_STATUSES", "REPORT_SCHEMA_VERSION", "SCHEMA_VERSION", "SEVERITIES",
    "VERDICT_STATUSES", "Culprit", "DeploymentReport", "Finding", "FleetSection", "GridRow", "GroupBrief", "NodeClass",
    "NodeEntry", "NodeOutcome", "ProbeResult", "ProcessBrief", "Report", "RingView", "Snapshot", "SnapshotError", "Verdict",
]
