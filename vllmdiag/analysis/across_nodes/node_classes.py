"""Fold per-node verdicts into node-set classes (``clush -b`` style) and write the fleet verdict (pure)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.bisect import STATUS_RANK
from vllmdiag.model import Culprit, DeploymentReport, Finding, GridRow, NodeClass, NodeEntry, NodeOutcome, Snapshot, Verdict

# One character per GPU (worker) in the grid: what the renderers colour.
CELL_OK, CELL_CULPRIT, CELL_BLOCKED, CELL_DEGRADED, CELL_UNKNOWN = ".", "X", "b", "d", "?"
MAX_CULPRITS = 16
FAST_FOLD = 2000  # above this many names, fold without ClusterShell (see fast_fold)
_LAST_NUMBER = re.compile(r"(.*?)(\d+)(\D*)")


@dataclass
class NodeView:
    name: str
    outcome: NodeOutcome
    verdict: Verdict
    reports: list[DeploymentReport] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    snapshot: Snapshot | None = None
    gpus: str = ""
    _sig: tuple[Any, ...] | None = field(default=None, repr=False, compare=False)

    @property
    def answered(self) -> bool:
        return self.snapshot is not None

    def signature(self) -> tuple[Any, ...]:
        """What makes two nodes 'the same' for folding: pids and timings differ, faults do not."""
        if self._sig is None:
            self._sig = self._signature()
        return self._sig

    def _signature(self) -> tuple[Any, ...]:
        if not self.answered:
            return ("node", self.outcome.status, (self.outcome.reason or "").split(":")[0])
        faults = sorted({(f.code, c.title, c.rank if c.rank is not None else -1) for f in self.findings
                         if f.severity != "info" for c in (f.culprits or [Culprit("", None, "", None, "", "")])})
        return ("verdict", self.verdict.status, self.verdict.layer or "", tuple(faults), self.gpus)

    @property
    def rank(self) -> int:
        return STATUS_RANK.get(self.verdict.status, 2)


def gpu_cells(reports: list[DeploymentReport], verdict: Verdict, answered: bool) -> str:
    if not answered:
        return ""
    culprit_pids = {c.pid for r in reports for c in r.verdict.culprits if c.pid is not None}
    culprit_ranks = {(r.id, c.rank) for r in reports for c in r.verdict.culprits if c.pid is None}
    cells = []
    for r in reports:
        for w in (p for p in r.processes if p.role in ("worker", "worker_starting")):
            if w.pid in culprit_pids or (r.id, w.ranks.get("tp")) in culprit_ranks:
                cells.append(CELL_CULPRIT)
            elif r.verdict.status == "blocked":
                cells.append(CELL_BLOCKED)
            elif r.verdict.status in ("degraded", "inconclusive"):
                cells.append(CELL_DEGRADED if r.verdict.status == "degraded" else CELL_UNKNOWN)
            else:
                cells.append(CELL_OK)
    return "".join(cells)


def fold_names(names: list[str]) -> str:
    """``gpu[00-11,13-47]``. Names from saved snapshots are untrusted: ones that are not plain node
    names (``a,b``, ``x[1-2]``, ``@g`` would be parsed as node-set syntax) are listed as they are."""
    # The classes and the grid fold the same member lists: at 100,000 nodes once is enough.
    return _fold_once(tuple(names))


@functools.lru_cache(maxsize=8)
def _fold_once(names_tuple: tuple[str, ...]) -> str:
    names = list(names_tuple)
    from ClusterShell.NodeSet import NodeSet

    from vllmdiag.model.fleet import NODE_NAME

    if not all(NODE_NAME.fullmatch(n) for n in names):
        return ",".join(sorted(names))
    if len(names) > FAST_FOLD:
        return fast_fold(names)
    return str(NodeSet.fromlist(names))


def fast_fold(names: list[str]) -> str:
    """The same ``prefix[ranges]suffix`` folding on the last number of each name, linear after a sort
    (NodeSet.fromlist takes seconds at 100,000 names, and the verdict is on the sweep's deadline).
    Numbers fold only with numbers of the same written width when zero-padded, as in ClusterShell."""
    from vllmdiag.model.fleet import natural_key

    found: dict[tuple[str, str], list[str]] = {}
    loose: list[str] = []
    for name in set(names):
        m = _LAST_NUMBER.fullmatch(name)
        if m is None:
            loose.append(name)
        else:
            found.setdefault((m.group(1), m.group(3)), []).append(m.group(2))
    groups: dict[tuple[str, str, int], list[int]] = {}
    for (pre, suf), numbers in found.items():
        padded = {len(d) for d in numbers if d.startswith("0") and len(d) > 1}
        for d in numbers:  # 10 folds with 07 (width 2), 7 does not
            width = len(d) if len(d) in padded else 0
            groups.setdefault((pre, suf, width), []).append(int(d))
    parts = [f"{pre}{_ranges(sorted(nums), width)}{suf}" for (pre, suf, width), nums in groups.items()]
    return ",".join(sorted(parts + loose, key=natural_key))


def _ranges(nums: list[int], width: int) -> str:
    if len(nums) == 1:
        return f"{nums[0]:0{width}d}"
    spans: list[str] = []
    lo = prev = nums[0]
    for n in [*nums[1:], None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        spans.append(f"{lo:0{width}d}" if lo == prev else f"{lo:0{width}d}-{prev:0{width}d}")
        if n is not None:
            lo = prev = n
    return "[" + ",".join(spans) + "]"


def fold_classes(views: list[NodeView]) -> list[NodeClass]:
    return fold_index(views)[0]


def fold_index(views: list[NodeView]) -> tuple[list[NodeClass], dict[tuple[Any, ...], NodeClass]]:
    """The classes, worst first, and each signature's class (the fleet verdict's head without a refold)."""
    index: dict[tuple[Any, ...], NodeClass] = {}
    by_sig: dict[tuple[Any, ...], list[NodeView]] = {}
    for v in views:
        by_sig.setdefault(v.signature(), []).append(v)
    ranked: list[tuple[int, NodeClass]] = []
    for members in by_sig.values():
        first = members[0]
        status = first.verdict.status if first.answered else first.outcome.status
        nodes = fold_names([m.name for m in members])
        summary = "No vLLM deployment found." if status == "no-deployment" else first.verdict.summary
        text = f"{nodes}: {summary}" if first.answered else f"{nodes} {status}: {summary}"
        cls = NodeClass(nodes=nodes, count=len(members), status=status, layer=first.verdict.layer, summary=summary,
                        text=text, gpus=first.gpus)
        index[first.signature()] = cls
        ranked.append((first.rank, cls))
    ranked.sort(key=lambda rc: (-rc[0], -rc[1].count, rc[1].nodes))
    return [c for _, c in ranked], index


GRID_ORDER = ("blocked", "degraded", "unreachable", "timeout", "error", "inconclusive", "starting", "no-deployment", "healthy")


def node_why(view: NodeView) -> str:
    """One line on why a node is not healthy, for the grid's "why" column: how it failed to answer, else
    its verdict's layer and first culprit (what it does), else the verdict's summary; "" when healthy."""
    if not view.answered or view.outcome.status != "ok":
        return view.outcome.reason or view.outcome.status
    v = view.verdict
    if v.status in ("healthy", "no-deployment"):
        return ""
    head = f"{v.layer} layer" if v.layer else v.status
    c = v.culprits[0] if v.culprits else None
    if c is None:
        return f"{head}: {v.summary}"
    who = (c.title or c.role) + (f" (pid {c.pid}" + (f", rank {c.rank})" if c.rank is not None else ")")
                                 if c.pid is not None else f" (rank {c.rank})" if c.rank is not None else "")
    more = f" and {len(v.culprits) - 1} more" if len(v.culprits) > 1 else ""
    return f"{head}, {who}{more}: {c.reason}"


def grid_rows(nodes: list[NodeEntry]) -> list[GridRow]:
    """Nodes with the same state and the same GPU picture, folded; worst first. An answered node's why is
    cut to its layer and culprit (no pid, no detail: those would keep nodes with one fault apart)."""
    rows: dict[tuple[str, str, str], list[str]] = {}
    for n in nodes:
        state = n.status if n.status != "ok" else (n.verdict or "ok")
        reason = (n.reason or "").split(":")[0] if n.status != "ok" else n.why.split(": ")[0].split(" (pid ")[0]
        rows.setdefault((state, n.gpus or "", reason), []).append(n.name)
    out = [GridRow(nodes=fold_names(names), count=len(names), state=state, gpus=gpus, reason=reason)
           for (state, gpus, reason), names in rows.items()]
    out.sort(key=lambda r: (GRID_ORDER.index(r.state) if r.state in GRID_ORDER else 0, -r.count))
    return out


def fleet_verdict(views: list[NodeView], classes: list[NodeClass],
                  index: dict[tuple[Any, ...], NodeClass] | None = None) -> Verdict:
    if not views:
        return Verdict(status="no-deployment", summary="No node to analyse.")
    counted = [v for v in views if v.verdict.status != "no-deployment"] or views
    # Of nodes equally bad, one that names a culprit leads (the engine's node of a multi-node group waits
    # for a rank that another node's verdict names: that node says what is wrong).
    worst = max(counted, key=lambda v: (v.rank, any(c.pid is not None for c in v.verdict.culprits)))
    lines = [c.text if c.status not in ("healthy", "no-deployment") else f"{c.nodes} {c.status}" for c in classes]
    if worst.verdict.status in ("healthy", "no-deployment"):
        status = worst.verdict.status
        empty = fold_names([v.name for v in views if v.verdict.status == "no-deployment"])
        summary = f"All {len(views)} nodes healthy." if status == "healthy" else f"No vLLM deployment found on {empty}."
        if len(classes) > 1:
            summary += " " + "; ".join(lines)
        return Verdict(status=status, summary=summary, evidence=lines)
    if worst.answered:
        same = [v for v in counted if v.signature() == worst.signature()]
    else:  # the fleet is inconclusive because nodes did not answer: all of them are the culprits
        same = [v for v in counted if not v.answered]
    culprits = _culprits(same, MAX_CULPRITS)
    head = (index or {}).get(worst.signature())
    if head is None:
        head_nodes = fold_names([v.name for v in views if v.signature() == worst.signature()])
        head = next(c for c in classes if c.nodes == head_nodes)
    others = [c for c in classes if c is not head]
    summary = head.text
    if others:
        summary += " Elsewhere: " + "; ".join(f"{c.nodes} {c.status}" for c in others[:4]) + "."
    steps = [f"on {worst.name}: {s}" for s in worst.verdict.next_steps]
    return Verdict(status=worst.verdict.status, layer=worst.verdict.layer, culprits=culprits, summary=summary,
                   evidence=lines[:12] + (worst.verdict.evidence[:6] if worst.answered else []), next_steps=steps[:8],
                   confidence=worst.verdict.confidence)


def _culprits(views: list[NodeView], limit: int) -> list[Culprit]:
    out: list[Culprit] = []
    for v in views:
        if len(out) >= limit:
            break
        if not v.answered:
            out.append(Culprit(node=v.name, pid=None, role="node", rank=None, title="node",
                               reason=f"{v.outcome.status}: {v.outcome.reason or ''}".rstrip(": ")))
        else:
            out += v.verdict.culprits
    return out[:limit]
