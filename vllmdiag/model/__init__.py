"""The contract between the parts: ``Snapshot`` (what probes collect), ``Finding``/``Verdict`` (what
analysis concludes), ``Report`` (what render draws and ``--json`` prints). Pure data, no I/O; every
class round-trips through plain JSON (``from_dict(to_dict(x)) == x``).

The report and fleet classes load on first use: ``vllmdiag collect`` (every node of a sweep, and each
probe) needs only the snapshot, and a dataclass costs its creation at import (~7 ms for those two).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from vllmdiag.model._check import SnapshotError
from vllmdiag.model.snapshot import PROBE_STATUSES, SCHEMA_VERSION, ProbeResult, Snapshot
from vllmdiag.model.verdict import LAYERS, SEVERITIES, VERDICT_STATUSES, Culprit, Finding, Verdict

if TYPE_CHECKING:
    from vllmdiag.model.fleet import NODE_STATUSES, FleetSection, GridRow, GroupBrief, NodeClass, NodeEntry, NodeOutcome
    from vllmdiag.model.report import (
        REPORT_SCHEMA_VERSION,
        DeploymentReport,
        NodeSection,
        ProcessBrief,
        Report,
        RingRow,
        RingView,
        StackRow,
    )

_LAZY = {name: "vllmdiag.model.fleet" for name in
         ("NODE_STATUSES", "FleetSection", "GridRow", "GroupBrief", "NodeClass", "NodeEntry", "NodeOutcome")}
_LAZY.update({name: "vllmdiag.model.report" for name in
              ("REPORT_SCHEMA_VERSION", "DeploymentReport", "NodeSection", "ProcessBrief", "Report", "RingRow", "RingView",
               "StackRow")})

__all__ = [
    "LAYERS", "NODE_STATUSES", "PROBE_STATUSES", "REPORT_SCHEMA_VERSION", "SCHEMA_VERSION", "SEVERITIES",
    "VERDICT_STATUSES", "Culprit", "DeploymentReport", "Finding", "FleetSection", "GridRow", "GroupBrief", "NodeClass",
    "NodeEntry", "NodeOutcome", "NodeSection", "ProbeResult", "ProcessBrief", "Report", "RingRow", "RingView", "Snapshot",
    "SnapshotError", "StackRow", "Verdict",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'vllmdiag.model' has no attribute {name!r}")
