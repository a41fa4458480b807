"""The fleet sections of a report (``nodes`` and ``fleet`` in the JSON): what a sweep adds on top of the
per-node verdicts. Computed by fleet analysis, drawn by render; nothing here recomputes anything."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from vllmdiag.model import _check as c
from vllmdiag.model.snapshot import Snapshot

NODE_STATUSES = ("ok", "unreachable", "timeout", "error")
# Host names, FQDNs, IPv4, pod names, slurm names. No shell metacharacters, no spaces, no leading '-'
# (ssh and kubectl would read it as an option), no '/' (it becomes a file name under --save).
NODE_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:+-]{0,252}")


def natural_key(name: str) -> tuple[Any, ...]:
    """gpu2 before gpu10, as ClusterShell orders a node set."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


@dataclass
class NodeOutcome:
    """How one node of a sweep answered: ok with its snapshot, or unreachable / timeout / error with why."""

    name: str
    status: str
    reason: str | None
    duration_s: float
    snapshot: Snapshot | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "reason": self.reason, "duration_s": round(self.duration_s, 3)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> NodeOutcome:
        status = raw.get("status")
        if status not in NODE_STATUSES or not isinstance(raw.get("name"), str):
            raise c.SnapshotError(f"node entry {raw!r:.80}: needs a name and a status in {', '.join(NODE_STATUSES)}")
        reason = raw.get("reason")
        return cls(name=raw["name"], status=status, reason=None if reason is None else str(reason),
                   duration_s=float(raw.get("duration_s") or 0.0))


@dataclass
class NodeEntry:
    """One node of the sweep: how it answered (status/reason) and, when it did, its verdict and GPU cells."""

    name: str
    status: str
    reason: str | None
    duration_s: float
    verdict: str
    gpus: str = ""  # one character per GPU (worker): . ok, X culprit, b blocked, d degraded, ? unknown
    # Why the node is not healthy, in one line: how it failed to answer, or its verdict's layer and culprit
    # ("" for a healthy node; absent from reports written before it, read as "").
    why: str = ""

    def to_dict(self) -> dict[str, Any]:
        # Not asdict: its deep copy cost seconds for the 100,000 nodes a sweep may list (issue 15 item 9).
        return {"name": self.name, "status": self.status, "reason": self.reason, "duration_s": self.duration_s,
                "verdict": self.verdict, "gpus": self.gpus, "why": self.why}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> NodeEntry:
        obj = c.expect_dict(raw, where)
        return cls(name=c.text(obj, "name", where), status=c.one_of(obj, "status", NODE_STATUSES, where),
                   reason=c.opt_text(obj, "reason", where), duration_s=c.number(obj, "duration_s", where),
                   verdict=c.text(obj, "verdict", where, ""), gpus=c.text(obj, "gpus", where, ""),
                   why=c.text(obj, "why", where, ""))


@dataclass
class NodeClass:
    """Nodes with the same fault folded into one node set (``clush -b``), worst class first."""

    nodes: str
    count: int
    status: str
    layer: str | None
    summary: str
    text: str
    gpus: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> NodeClass:
        obj = c.expect_dict(raw, where)
        return cls(nodes=c.text(obj, "nodes", where), count=c.integer(obj, "count", where),
                   status=c.text(obj, "status", where), layer=c.opt_text(obj, "layer", where),
                   summary=c.text(obj, "summary", where, ""), text=c.text(obj, "text", where, ""),
                   gpus=c.text(obj, "gpus", where, ""))


@dataclass
class GroupBrief:
    """A rank group that spans nodes (multi-node TP/PP), keyed by its rendezvous address."""

    key: str
    nodes: list[str]
    nnodes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> GroupBrief:
        obj = c.expect_dict(raw, where)
        return cls(key=c.text(obj, "key", where), nodes=c.texts(obj, "nodes", where),
                   nnodes=c.integer(obj, "nnodes", where))


@dataclass
class GridRow:
    """One row of the nodes x GPUs picture: nodes with the same state and GPU cells, folded."""

    nodes: str
    count: int
    state: str
    gpus: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> GridRow:
        obj = c.expect_dict(raw, where)
        return cls(nodes=c.text(obj, "nodes", where), count=c.integer(obj, "count", where),
                   state=c.text(obj, "state", where), gpus=c.text(obj, "gpus", where, ""),
                   reason=c.text(obj, "reason", where, ""))


@dataclass
class FleetSection:
    classes: list[NodeClass] = field(default_factory=list)
    groups: list[GroupBrief] = field(default_factory=list)
    grid: list[GridRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"classes": [x.to_dict() for x in self.classes], "groups": [x.to_dict() for x in self.groups],
                "grid": [x.to_dict() for x in self.grid]}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> FleetSection:
        obj = c.expect_dict(raw, where)
        return cls(classes=_items(obj, "classes", NodeClass.from_dict, where),
                   groups=_items(obj, "groups", GroupBrief.from_dict, where),
                   grid=_items(obj, "grid", GridRow.from_dict, where))


def _items(obj: dict[str, Any], key: str, read: Any, where: str) -> list[Any]:
    return [read(x, f"{where}.{key}[{i}]") for i, x in enumerate(c.expect_list(obj.get(key, []), f"{where}.{key}"))]
