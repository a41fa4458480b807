"""The finding builders every analyzer (``analysis/layers/``) and cross-node check uses (pure): a finding and its
culprits in the model's shape. Builders, not a derived view, so not in ``analysis/views/``."""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.views.deployments import Deployment, display_title, rank_of, role_of
from vllmdiag.model import Culprit, Finding, Snapshot


def culprit(snap: Snapshot, proc: dict[str, Any], reason: str) -> Culprit:
    return Culprit(node=snap.node, pid=proc.get("pid"), role=role_of(proc), rank=rank_of(proc),
                   title=display_title(proc), reason=reason)


def finding(code: str, layer: str, severity: str, snap: Snapshot, dep: Deployment | None, message: str,
            pids: list[int], evidence: dict[str, Any], culprits: list[Culprit]) -> Finding:
    return Finding(code=code, layer=layer, severity=severity, node=snap.node, message=message, pids=pids,
                   evidence=evidence, deployment=dep.id if dep else None, culprits=culprits)
