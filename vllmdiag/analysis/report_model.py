"""Turn analysis' view of a deployment into the model the report carries (pure): process roles, ranks
and display titles, and who writes and reads each ring. Render draws these and never recomputes them."""

from __future__ import annotations

from vllmdiag.analysis.views.deployments import Deployment, display_title, rank_of, role_of
from vllmdiag.analysis.views.ring_roles import ring_roles
from vllmdiag.model import DeploymentReport, ProcessBrief, RingView, Snapshot, Verdict


def deployment_reports(snapshot: Snapshot, judged: list[tuple[Deployment, Verdict]]) -> list[DeploymentReport]:
    deps = [d for d, _ in judged]
    rings: dict[str, list[RingView]] = {}
    for r in ring_roles(snapshot, deps):
        if r.deployment is not None:
            rings.setdefault(r.deployment.id, []).append(RingView(
                name=r.name, role=r.role, writer=r.writer["pid"] if r.writer else None,
                readers=[p["pid"] if p else None for p in r.readers]))
    return [DeploymentReport(id=d.id, node=d.node, root_pid=d.root_pid, verdict=v, processes=briefs(d),
                             configured=dict(d.configured), rings=rings.get(d.id, [])) for d, v in judged]


def briefs(dep: Deployment) -> list[ProcessBrief]:
    out = []
    for p in dep.processes:
        # Snapshots are untrusted: only integer ranks and a string state go into the contract.
        ranks = {str(k): v for k, v in (p.get("ranks") or {}).items() if isinstance(v, int) and not isinstance(v, bool)}
        state = p.get("state")
        out.append(ProcessBrief(pid=p["pid"], ppid=p["ppid"], role=role_of(p), rank=rank_of({"ranks": ranks}),
                                title=display_title(p), state=None if state is None else str(state), ranks=ranks))
    return out
