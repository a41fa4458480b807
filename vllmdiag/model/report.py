"""The verdict contract as a model: what ``triage --json``/``analyze --json``/``sweep --json`` print
(DESIGN.md "Output contract"). Analysis builds a ``Report``; render draws one and never recomputes it;
``Report.from_dict(report.to_dict()) == report``, so a saved report can be drawn again anywhere."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.model import _check as c
from vllmdiag.model.fleet import FleetSection, NodeEntry
from vllmdiag.model.snapshot import Snapshot
from vllmdiag.model.timeline import RankCell, Timeline
from vllmdiag.model.verdict import Finding, Verdict

REPORT_SCHEMA_VERSION = 1


@dataclass
class ProcessBrief:
    """One process of a deployment as analysis sees it: role and rank inferred, title for display."""

    pid: int
    ppid: int
    role: str
    rank: int | None
    title: str
    state: str | None = None
    ranks: dict[str, int] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "ppid": self.ppid, "role": self.role, "rank": self.rank, "ranks": dict(self.ranks),
                "title": self.title, "state": self.state}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> ProcessBrief:
        obj = c.expect_dict(raw, where)
        ranks = c.expect_dict(obj.get("ranks") or {}, f"{where}.ranks")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in ranks.values()):
            raise c.SnapshotError(f"{where}.ranks: expected integers")
        return cls(pid=c.integer(obj, "pid", where), ppid=c.integer(obj, "ppid", where),
                   role=c.text(obj, "role", where, "other"), rank=c.opt_int(obj, "rank", where),
                   title=c.text(obj, "title", where, ""), state=c.opt_text(obj, "state", where),
                   ranks={str(k): v for k, v in ranks.items()})


@dataclass
class RingView:
    """Who writes and who reads one shm ring (vllm-internals 1.12), as pids of the deployment; the ring's
    sampled numbers stay in the snapshot's ``rings`` data under the same ``name``."""

    name: str
    role: str  # rpc_broadcast_mq | worker_response_mq | group_broadcaster | unknown
    writer: int | None = None
    readers: list[int | None] = field(default_factory=list)  # index = reader flag index

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "role": self.role, "writer": self.writer, "readers": list(self.readers)}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> RingView:
        obj = c.expect_dict(raw, where)
        readers = c.expect_list(obj.get("readers", []), f"{where}.readers")
        if not all(r is None or (isinstance(r, int) and not isinstance(r, bool)) for r in readers):
            raise c.SnapshotError(f"{where}.readers: expected pids or nulls")
        return cls(name=c.text(obj, "name", where), role=c.text(obj, "role", where, "unknown"),
                   writer=c.opt_int(obj, "writer", where), readers=list(readers))


@dataclass
class RingRow:
    """One shm ring as the node's queue section shows it, decided by analysis (``analysis/sections.py``): its
    role and who writes and reads it in display words, the unread slots per reader, the readers a critical
    queue finding blames (``laggards``: reader indexes) and the sampled numbers. Render formats it."""

    name: str
    role: str  # rpc | response | group broadcast | ?
    writer: str
    readers: list[str]
    unread: list[int]
    max_chunks: int
    laggards: set[int]
    samples: list[dict[str, Any]]
    state: str
    # What the terminal's ring table shows (render/queue_view.py), decided here too: analysis' role
    # (``kind``), the ring's size, writer and readers by title (reader i = ``RingView.readers[i]``), the
    # unread slots per reader (the stable count where sampled, else the last), and the sampling words.
    kind: str = "unknown"
    size: str = ""
    term_writer: str = "-"
    term_readers: list[str] = field(default_factory=list)
    term_unread: list[Any] = field(default_factory=list)
    term_state: str = ""


@dataclass
class StackRow:
    """One row of the node's stack section: a folded class of ranks (``gpu.stack_classes``) or a process
    outside them, with one member's main-thread stack (innermost first) and whether it is a culprit."""

    label: str
    entry: dict[str, Any]  # the class (or process) as the stack_classes finding folded it
    stack: list[str]
    culprit: bool
    deployment: str | None = None  # the stack_classes finding's deployment
    other: bool = False  # a process outside the folded classes (the finding's ``others``)


@dataclass
class EndpointRow:
    """One ZMQ listener of the node's deployments with its ZMTP answer and what that answer means, as the
    handshake analysis reads it (``problem``: a red cell; ``note``: why)."""

    endpoint: str
    holders: list[int]
    accepted: Any
    status: str  # the ZMTP status, "-" when not dialled
    type: str  # the peer's Socket-Type, "?" when none
    ms: Any
    problem: bool
    note: str


@dataclass
class HttpRow:
    """One API server of the node's deployments as the http probe saw it (address, /health, /metrics
    samples, client connections): the server's record, whole, for the client views to format."""

    address: str
    server: dict[str, Any]


@dataclass
class GpuRow:
    """One NVML GPU of the node (its record, whole) and the ranks whose worker runs on it."""

    nvml: dict[str, Any]
    ranks: list[Any] = field(default_factory=list)


@dataclass
class NodeSection:
    """What one node's report shows of its rings, stacks, endpoints, API servers and GPUs, computed once
    by analysis. Not part of the JSON contract (``to_dict``): analysis attaches it to every report it
    builds or reads back. A section that could not be built from odd-typed data keeps the error,
    so the view that draws it says so."""

    node: str
    rings: list[RingRow] = field(default_factory=list)
    stacks: list[StackRow] = field(default_factory=list)
    rings_error: Exception | None = None
    stacks_error: Exception | None = None
    endpoints: list[EndpointRow] = field(default_factory=list)
    http: list[HttpRow] = field(default_factory=list)
    gpus: list[GpuRow] = field(default_factory=list)
    nvml_probe: dict[str, Any] | None = None  # NVML's status and reason where the probe ran
    # "endpoints" | "http" | "gpus" -> the error that part met on odd-typed data (its view says so)
    errors: dict[str, Exception] = field(default_factory=dict)


@dataclass
class CollectionRow:
    """How one snapshot was collected, for the report's header: when, by which vllmdiag, how long, under
    which budget (the option as recorded: untrusted, the header checks its type), and every probe that did
    not fully see as (probe, status, reason)."""

    node: str
    collected_at: str
    vllmdiag_version: str
    duration_s: float
    budget_s: Any
    probe_problems: list[tuple[str, str, str]] = field(default_factory=list)


def short_label(title: str, role: str) -> str:
    """`TP3`, `EngineCore`, `API server`: how people call a vLLM process (its title, else its role)."""
    if title.startswith("VLLM::"):
        return title.split("::", 1)[1].split()[0].replace("Worker_", "")
    return {"api_server": "API server", "engine_core": "EngineCore", "client": "client"}.get(role, title[:40])


@dataclass
class DeploymentReport:
    id: str
    node: str
    root_pid: int
    verdict: Verdict
    processes: list[ProcessBrief] = field(default_factory=list)
    configured: dict[str, int] = field(default_factory=dict)  # parallel sizes the API server's argv states
    rings: list[RingView] = field(default_factory=list)
    # The vLLM it runs ("0.32.0"), read from its environment's files without touching it, and from where;
    # None when not seen (reports written before it was carried read as None too).
    vllm_version: str | None = None
    vllm_version_source: str | None = None
    # What the node report draws over time (model/timeline.py); absent from reports written before them.
    rank_strip: list[RankCell] = field(default_factory=list)
    timeline: Timeline | None = None

    @property
    def pids(self) -> set[int]:
        return {p.pid for p in self.processes}

    def process(self, pid: int | None) -> ProcessBrief | None:
        return next((p for p in self.processes if p.pid == pid), None) if pid is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "node": self.node, "root_pid": self.root_pid, "configured": dict(self.configured),
                "processes": [p.to_dict() for p in self.processes], "verdict": self.verdict.to_dict(),
                "rings": [r.to_dict() for r in self.rings], "vllm_version": self.vllm_version,
                "vllm_version_source": self.vllm_version_source, "rank_strip": [r.to_dict() for r in self.rank_strip],
                "timeline": None if self.timeline is None else self.timeline.to_dict()}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> DeploymentReport:
        obj = c.expect_dict(raw, where)
        configured = c.expect_dict(obj.get("configured", {}), f"{where}.configured")
        if not all(isinstance(v, int) and not isinstance(v, bool) for v in configured.values()):
            raise c.SnapshotError(f"{where}.configured: expected integers")
        return cls(id=c.text(obj, "id", where), node=c.text(obj, "node", where),
                   root_pid=c.integer(obj, "root_pid", where), verdict=Verdict.from_dict(obj.get("verdict"), f"{where}.verdict"),
                   processes=_items(obj, "processes", ProcessBrief.from_dict, where),
                   configured={str(k): v for k, v in configured.items()},
                   rings=_items(obj, "rings", RingView.from_dict, where),
                   vllm_version=c.opt_text(obj, "vllm_version", where),
                   vllm_version_source=c.opt_text(obj, "vllm_version_source", where),
                   rank_strip=_items(obj, "rank_strip", RankCell.from_dict, where),
                   timeline=None if obj.get("timeline") is None else Timeline.from_dict(obj["timeline"], f"{where}.timeline"))


@dataclass
class Report:
    verdict: Verdict
    deployments: list[DeploymentReport]
    findings: list[Finding]
    snapshots: list[Snapshot]
    # A sweep's sections (None for one node): how each node answered, folded classes, the GPU grid.
    nodes: list[NodeEntry] | None = None
    fleet: FleetSection | None = None
    # How the sweep reached its nodes (``--exec`` template, ``%h`` = node), so a report's read-only
    # commands can be aimed at a node the same way; None for ssh or one node.
    exec_template: str | None = None
    # Each node's rings and stacks as analysis decided them (``analysis/sections.py``); outside the JSON
    # contract and equality: a saved report gets them again when it is read back to be drawn.
    sections: dict[str, NodeSection] = field(default_factory=dict, compare=False, repr=False)
    # How each snapshot was collected, in the snapshots' order (the header's lines); likewise outside.
    collection: list[CollectionRow] = field(default_factory=list, compare=False, repr=False)

    @property
    def is_fleet(self) -> bool:
        return self.nodes is not None

    def render_dict(self) -> dict[str, Any]:
        """``to_dict()`` plus the typed sections under ``sections`` and the header's ``collection``: what
        the file and compact renderers read. Never written (``--json`` prints ``to_dict()``)."""
        return {**self.to_dict(), "sections": dict(self.sections), "collection": list(self.collection)}

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": REPORT_SCHEMA_VERSION,
            "verdict": self.verdict.to_dict(),
            "deployments": [d.to_dict() for d in self.deployments],
            "findings": [f.to_dict() for f in self.findings],
        }
        if self.nodes is not None:
            out["nodes"] = [n.to_dict() for n in self.nodes]
            out["fleet"] = (self.fleet or FleetSection()).to_dict()
        if self.exec_template is not None:
            out["exec_template"] = self.exec_template
        if len(self.snapshots) == 1 and self.nodes is None:
            out["snapshot"] = self.snapshots[0].to_dict()
        else:
            out["snapshots"] = [s.to_dict() for s in self.snapshots]
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str = "report") -> Report:
        obj = c.expect_dict(raw, where)
        if obj.get("schema_version") != REPORT_SCHEMA_VERSION:
            raise c.SnapshotError(f"{where}: report schema_version {obj.get('schema_version')!r} is not supported")
        if "snapshot" in obj:
            snaps = [Snapshot.from_dict(obj["snapshot"], f"{where}.snapshot")]
        else:
            snaps = _items(obj, "snapshots", Snapshot.from_dict, where)
        nodes = _items(obj, "nodes", NodeEntry.from_dict, where) if "nodes" in obj else None
        fleet = FleetSection.from_dict(obj.get("fleet", {}), f"{where}.fleet") if nodes is not None else None
        return cls(verdict=Verdict.from_dict(obj.get("verdict"), f"{where}.verdict"),
                   deployments=_items(obj, "deployments", DeploymentReport.from_dict, where),
                   findings=_items(obj, "findings", Finding.from_dict, where), snapshots=snaps, nodes=nodes, fleet=fleet,
                   exec_template=c.opt_text(obj, "exec_template", where))


def is_report(raw: Any) -> bool:
    """A triage/analyze/sweep JSON output (as opposed to a bare snapshot)."""
    return isinstance(raw, dict) and "verdict" in raw and ("snapshot" in raw or "snapshots" in raw)


def is_drawable(raw: dict[str, Any]) -> bool:
    """Written by a vllmdiag that carries everything render needs (ring roles, the fleet grid); an older
    report is analysed again from the snapshots it embeds instead, as ``analyze`` always did."""
    deps = raw.get("deployments")
    fleet = raw.get("fleet")
    return (isinstance(deps, list) and all(isinstance(d, dict) and "rings" in d for d in deps)
            and ("nodes" not in raw or (isinstance(fleet, dict) and "grid" in fleet)))


def _items(obj: dict[str, Any], key: str, read: Any, where: str) -> list[Any]:
    return [read(x, f"{where}.{key}[{i}]") for i, x in enumerate(c.expect_list(obj.get(key, []), f"{where}.{key}"))]
