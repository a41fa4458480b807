"""Fleet analysis (pure): per-node verdicts, cross-node rank groups, folded node classes, one verdict.

Each snapshot is analysed alone by the single-node engine; then the shares of multi-node groups are
joined (``groups``), nodes that did not answer are folded in as their own classes, and the fleet
verdict is the worst node's, named by node + process + rank. Linear in the number of nodes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from vllmdiag.analysis.across_nodes import dp_world_joined as dp_worlds
from vllmdiag.analysis.across_nodes import headless_share, pipeline_stages, rank_groups, ray_groups
from vllmdiag.analysis.across_nodes.node_classes import NodeView, fleet_verdict, fold_index, gpu_cells, grid_rows, node_why
from vllmdiag.analysis.across_nodes.uniform_hang import uniform_across_nodes
from vllmdiag.analysis.bisect import STATUS_RANK, Judged, analyze_snapshot, decide, overall, snapshot_facts, to_model
from vllmdiag.analysis.contract import group_checks
from vllmdiag.analysis.facts import Facts
from vllmdiag.model import Finding, FleetSection, GroupBrief, NodeEntry, NodeOutcome, Report, Snapshot, SnapshotError, Verdict

STATUS_OF_FAILED = "inconclusive"
# What malformed data from an untrusted node raises in analysis (RecursionError: absurd nesting).
MALFORMED = (SnapshotError, KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError)
HEADLESS_FALSE_CODES = ("handshake.engine_endpoint_gone", "handshake.http_not_listening")
UNIFORM_CODES = ("gpu.uniform_hang",)  # true of one node's share only if no rank is odd across the nodes


@dataclass
class _Node:
    name: str
    outcome: NodeOutcome
    snapshot: Snapshot | None = None
    facts: Facts | None = None  # the snapshot's, derived once: read by its analyzers, then by the cross-node stage
    reports: list[Judged] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


def is_fleet(snapshots: list[Snapshot]) -> bool:
    """Several snapshots from different nodes: what ``vllmdiag analyze DIR`` gets from ``sweep --save``."""
    return len({s.node for s in snapshots}) > 1


def analyze_fleet(snapshots: list[Snapshot], node_status: Mapping[str, NodeOutcome] | Iterable[NodeOutcome] | None = None
                  ) -> Report:
    status = _status_map(node_status)
    nodes: dict[str, _Node] = {}
    for snap in snapshots:
        # A node swept twice (or a duplicate file) keeps its last snapshot: one node, one verdict.
        nodes[snap.node] = _Node(snap.node, status.get(snap.node) or NodeOutcome(snap.node, "ok", None, snap.duration_s),
                                 snap)
    for name, outcome in status.items():
        if name not in nodes:
            nodes[name] = _Node(name, outcome)
    for node in nodes.values():
        if node.snapshot is not None:
            try:
                node.facts = snapshot_facts(node.snapshot)
                node.reports, node.findings = analyze_snapshot(node.snapshot, facts=node.facts)
                for r in node.reports:  # what the cross-node stage reads of each deployment
                    rank_groups.group_key(r.deployment)
            except MALFORMED as exc:
                _unreadable(node, exc)
    group_list = _groups_isolated(nodes)
    shared: dict[str, Verdict] = {}
    views = [_view(n, shared) for n in sorted(nodes.values(), key=lambda n: n.name)]
    classes, index = fold_index(views)
    verdict = fleet_verdict(views, classes, index)
    entries = [NodeEntry(name=v.name, status=v.outcome.status, reason=v.outcome.reason,
                         duration_s=round(v.outcome.duration_s, 3), verdict=v.verdict.status, gpus=v.gpus,
                         why=node_why(v)) for v in views]
    fleet = FleetSection(classes=classes, groups=[GroupBrief(g.key, g.nodes, g.nnodes) for g in group_list],
                         grid=grid_rows(entries))
    from vllmdiag.analysis.sections import with_sections

    return with_sections(Report(verdict=verdict, deployments=[r for n in views for r in n.reports],
                                findings=[f for n in views for f in n.findings],
                                snapshots=[n.snapshot for n in views if n.snapshot], nodes=entries, fleet=fleet))


def _groups_isolated(nodes: dict[str, _Node]) -> list[rank_groups.RankGroup]:
    """The cross-node stage; a node whose data breaks it is set aside as unreadable (issue 15 item 7:
    one malformed node must not sink the verdict of the others), then the stage runs again without it."""
    for _ in range(3):
        failed = {n.name: n.outcome.reason or n.outcome.status for n in nodes.values() if n.snapshot is None}
        try:
            return _reconcile_groups(nodes, failed)
        except MALFORMED:
            bad = [n for n in nodes.values() if n.snapshot is not None and not _groups_ok(n, failed)]
            if not bad:
                break
            for n in bad:
                _unreadable(n, ValueError("its process data breaks the cross-node comparison"))
    return []


def _groups_ok(node: _Node, failed: dict[str, str]) -> bool:
    alone = {node.name: [r.deployment for r in node.reports]}
    facts = {node.name: node.facts} if node.facts is not None else {}
    try:
        for group in rank_groups.join(alone):
            _check_group(group, facts, failed)
    except MALFORMED:
        return False
    return True


def _unreadable(node: _Node, exc: BaseException) -> None:
    """A node that answered with data we cannot analyse: a node-level finding, not a crashed sweep."""
    why = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
    node.snapshot, node.facts, node.reports = None, None, []
    node.outcome = NodeOutcome(node.name, "error", f"snapshot unreadable: {why}", node.outcome.duration_s)
    node.findings = [Finding(code="fleet.node_unreadable", layer="process", severity="warning", node=node.name,
                             message=f"{node.name} answered, but its snapshot cannot be analysed ({why}); "
                                     "the other nodes were analysed without it.",
                             evidence={"error": why})]


def _status_map(node_status: Mapping[str, NodeOutcome] | Iterable[NodeOutcome] | None) -> dict[str, NodeOutcome]:
    if node_status is None:
        return {}
    if isinstance(node_status, Mapping):
        return dict(node_status)
    return {o.name: o for o in node_status}


def _reconcile_groups(nodes: dict[str, _Node], failed: dict[str, str]) -> list[rank_groups.RankGroup]:
    """Replace node-local checks that a multi-node group defeats by checks over the whole group."""
    per_node = {n.name: [r.deployment for r in n.reports] for n in nodes.values() if n.snapshot is not None}
    joined = [g for g in rank_groups.join(per_node) if g.nnodes > 1] + ray_groups.join(per_node)
    facts = _facts_by_node(nodes)
    touched: set[str] = set()
    for group in joined:
        for m in group.members:
            node = nodes[m.node]
            node.findings = [f for f in node.findings if not _defeated(f, m)]
            touched.add(m.node)
        cross = _check_group(group, facts, failed)
        if not group.key.startswith("ray:"):
            cross += _mp_shares(group, nodes, facts, cross)
        if group.key.startswith("ray:") and not any(f.severity != "info" for f in cross):
            whole = uniform_across_nodes(group, facts, {n: nodes[n].findings for n in group.nodes})
            if whole is not None:  # replaces each share's suspicion; every node of the group is blocked by it
                for m in group.members:
                    nodes[m.node].findings = [f for f in nodes[m.node].findings
                                              if not (f.deployment == m.deployment.id and f.code == "gpu.stall_suspected")]
                    cross.append(dataclasses.replace(whole, node=m.node, deployment=m.deployment.id,
                                                     evidence=dict(whole.evidence),
                                                     culprits=[dataclasses.replace(c, node=m.node) for c in whole.culprits]))
        if any(f.severity != "info" for f in cross):
            # A node's share held the same way (its confirm window's "uniform hang") is the peers waiting
            # for the rank that is odd across nodes: that rank is the culprit, not the waiting share.
            for m in group.members:
                nodes[m.node].findings = [f for f in nodes[m.node].findings
                                          if not (f.deployment == m.deployment.id and f.code in _explained(group))]
        for f in cross:
            if not _already_named(f, nodes):
                nodes[f.node].findings.append(f)
    # DP worlds whose ranks are separate `vllm serve` on several nodes (external/hybrid load balancing).
    dp_found, dp_seen = dp_worlds.cross_node(per_node, facts)
    for name, dep_id in dp_seen:
        nodes[name].findings = [f for f in nodes[name].findings
                                if not (f.deployment == dep_id and f.code in dp_worlds.REPLACED)]
        touched.add(name)
    for f in dp_found:
        nodes[f.node].findings.append(f)
        touched.add(f.node)
    for name in touched:
        node = nodes[name]
        assert node.snapshot is not None
        node.reports = [Judged(r.deployment, decide(node.snapshot, [f for f in node.findings
                                                                  if f.deployment == r.deployment.id]))
                        for r in node.reports]
    return joined


def _facts_by_node(nodes: dict[str, _Node]) -> dict[str, Facts]:
    """Each analysed node's facts (its snapshot's, as its analyzers read them): what the cross-node stage reads."""
    return {n.name: n.facts for n in nodes.values() if n.facts is not None}


def _mp_shares(group: rank_groups.RankGroup, nodes: dict[str, _Node], facts: dict[str, Facts],
               cross: list[Finding]) -> list[Finding]:
    """A multi-node mp group (`--nnodes`): headless shares read with the group's engine, and, when no
    rank check blamed anyone, the pipeline stage that holds the step on another node than the engine."""
    shares = {name: nodes[name].findings for name in group.nodes}
    headless_share.adopt(group, shares)
    for name, kept in shares.items():
        nodes[name].findings = kept
    if any(f.severity != "info" for f in cross):
        return headless_share.stranded(group)
    # The engine's node keeps its own stall warning (work in flight, nothing moved there: true of it).
    held = pipeline_stages.check(group, facts, shares)
    return [] if held is None else [held]


def _check_group(group: rank_groups.RankGroup, facts: dict[str, Facts], failed: dict[str, str]) -> list[Finding]:
    """Every cross-node group check, found by folder (analysis/across_nodes/checks/), in order."""
    return [f for check in group_checks() for f in check.check_group(group, facts, failed)]


def _explained(group: rank_groups.RankGroup) -> tuple[str, ...]:
    """A share's findings that a rank odd across the nodes explains: its uniform hang; for a Ray group also
    the engine node's stall suspicion (its local ranks wait alike, unjudged, for ranks elsewhere)."""
    return UNIFORM_CODES + (("gpu.stall_suspected",) if group.key.startswith("ray:") else ())


def _defeated(f: Finding, member: rank_groups.Member) -> bool:
    if f.deployment != member.deployment.id:
        return False
    if f.code == "process.rank_missing" or f.code in ray_groups.ELSEWHERE_CODES:
        return True  # each node holds only its share of the ranks; groups.check looks at the union
    if f.layer == "gpu" and member.deployment.kind == "ray_node":
        return True  # judged on node-local rank numbers, without the engine: the group's comparison replaces it
    if headless_share.defeated(f, member):
        return True  # a headless node's executor, or a share's own rank comparison (headless_share.py)
    # A headless node's `vllm serve --headless` has no frontend by design (vllm-internals 3.1): no engine
    # input endpoint, no HTTP port. Blaming it for them is a single-node view of a multi-node deployment.
    return member.headless and f.code in HEADLESS_FALSE_CODES


def _already_named(f: Finding, nodes: dict[str, _Node]) -> bool:
    """A cross-node finding adds nothing when a node-local one already blames the same processes."""
    mine = {(c.node, c.pid) for c in f.culprits if c.pid is not None}
    if not mine:
        return False
    named = {(c.node, c.pid) for n in nodes.values() for g in n.findings if g.layer == f.layer and g.severity != "info"
             for c in g.culprits}
    return mine <= named


def _view(node: _Node, shared: dict[str, Verdict]) -> NodeView:
    if node.snapshot is None:
        if node.outcome.status == "ok":  # listed as answered, but its snapshot file is not there
            node.outcome = NodeOutcome(node.name, "error", "no snapshot for this node", node.outcome.duration_s)
        reason = node.outcome.reason or node.outcome.status
        # Nodes that failed alike share one verdict object: 100,000 unreached nodes stay cheap.
        verdict = shared.get(reason) or shared.setdefault(reason, Verdict(
            status=STATUS_OF_FAILED, summary=reason, evidence=[reason], confidence="low"))
    else:
        verdict = overall([node.snapshot], node.reports, node.findings)
    reports = to_model(node.snapshot, node.reports) if node.snapshot is not None else []
    return NodeView(name=node.name, outcome=node.outcome, verdict=verdict, reports=reports, findings=node.findings,
                    snapshot=node.snapshot, gpus=gpu_cells(reports, verdict, node.snapshot is not None))


__all__ = ["STATUS_RANK", "analyze_fleet", "is_fleet"]
