"""What analysis concludes from snapshots: findings (with culprits and evidence) and verdicts."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from vllmdiag.model import _check as c

# "starting": the engine has not reported ready and its start-up was seen moving (DESIGN.md, output contract).
VERDICT_STATUSES = ("healthy", "starting", "blocked", "degraded", "no-deployment", "inconclusive")
LAYERS = ("process", "handshake", "queue", "gpu", "client")
SEVERITIES = ("info", "warning", "critical")
CONFIDENCES = ("high", "medium", "low")
FLAGS = ("out_of_view", "needs_confirm")  # Finding fields the JSON carries in its evidence
# Evidence keys another module than their writer reads, as typed Finding fields (issue 36 item 1;
# tests/unit/test_evidence_keys.py): read from ``evidence`` (which stays what the JSON shows), never written back.
SEEN = ("moving", "moved", "moved_what", "in_flight", "blind", "unasked", "starting", "observed", "window_s",
        "confirmed_by_resample", "nodes", "ring", "readers")


@dataclass
class Culprit:
    node: str
    pid: int | None
    role: str
    rank: int | None
    title: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: Any, where: str = "culprit") -> Culprit:
        obj = c.expect_dict(raw, where)
        return cls(node=c.text(obj, "node", where, ""), pid=c.opt_int(obj, "pid", where),
                   role=c.text(obj, "role", where, ""), rank=c.opt_int(obj, "rank", where),
                   title=c.text(obj, "title", where, ""), reason=c.text(obj, "reason", where, ""))


@dataclass
class Finding:
    code: str
    layer: str
    severity: str
    node: str
    message: str
    pids: list[int] = field(default_factory=list)
    evidence: dict[str, Any] = field(default_factory=dict)
    deployment: str | None = None
    # Who this finding blames, most responsible first; the verdict takes its culprits from here.
    culprits: list[Culprit] = field(default_factory=list)
    # Flags the engine reads (analysis/bisect.py, api.py), typed: part of what it blames runs beyond this
    # node's view (a P/D producer, a headless share's engine); its suspicion needs the confirm window
    # (True), holds already (False), or it does not say (None). The JSON carries them where it always did,
    # in ``evidence`` (FLAGS): set either way, both say the same (``__post_init__``, ``to_dict``).
    out_of_view: bool = False
    needs_confirm: bool | None = None
    # What the evidence says, typed for the modules that read another's finding (SEEN): derived from
    # ``evidence`` only (init=False: ``dataclasses.replace`` with a new evidence re-reads it); a writer that
    # adds to a made finding's evidence says so through ``add_evidence``.
    moving: bool = field(default=False, init=False)  # handshake.starting: the start-up was seen moving
    # gpu.progress, or a stall finding's ``progress``: work seen moving, what moved, what says work is in flight,
    # the probes that could not look, those no pass ran; the finding is of a start-up (gpu.progress).
    moved: bool = field(default=False, init=False)
    moved_what: list[str] = field(default_factory=list, init=False)
    in_flight: list[str] = field(default_factory=list, init=False)
    blind: list[str] = field(default_factory=list, init=False)
    unasked: list[str] = field(default_factory=list, init=False)
    starting: bool = field(default=False, init=False)
    observed: str = field(default="", init=False)  # what a suspicion saw, without its doubt (gpu.stall_suspected)
    window_s: float = field(default=0.0, init=False)  # how long progress was followed
    confirmed_by_resample: bool = field(default=False, init=False)  # the odd rank held in a second sample
    nodes: list[str] = field(default_factory=list, init=False)  # the nodes an across-node finding judged
    ring: str | None = field(default=None, init=False)  # the ring a queue finding is about (None: no ring)
    readers: list[int] = field(default_factory=list, init=False)  # that ring's blamed reader indexes

    def __post_init__(self) -> None:
        if "out_of_view" in self.evidence:
            self.out_of_view = self.out_of_view or bool(self.evidence["out_of_view"])
        if self.needs_confirm is None and isinstance(self.evidence.get("needs_confirm"), bool):
            self.needs_confirm = self.evidence["needs_confirm"]
        self.evidence.update(self._flags(self.evidence))
        self._read_seen()

    def add_evidence(self, **more: Any) -> None:
        """Add to a made finding's evidence (appended, as ``dict.update``), its typed fields following."""
        self.evidence.update(more)
        self._read_seen()

    def _read_seen(self) -> None:
        ev = self.evidence
        raw = ev.get("progress")
        progress: dict[str, Any] = raw if isinstance(raw, dict) else {}
        self.moving = bool(ev.get("moving"))
        self.moved = bool(ev["moved"] if "moved" in ev else progress.get("moved"))
        self.moved_what, self.in_flight = list(ev.get("moved_what") or []), list(ev.get("in_flight") or [])
        self.blind, self.unasked = [str(b) for b in ev.get("blind") or []], [str(u) for u in ev.get("unasked") or []]
        self.starting = bool(ev.get("starting"))
        self.observed = ev["observed"] if isinstance(ev.get("observed"), str) else ""
        self.window_s = float(ev.get("window_s") or 0.0)
        self.confirmed_by_resample = bool(ev.get("confirmed_by_resample"))
        self.nodes = [str(n) for n in ev.get("nodes") or []]
        self.ring = str(ev["ring"]) if "ring" in ev else None
        self.readers = [int(i) for i in ev.get("readers") or []]

    def _flags(self, evidence: dict[str, Any]) -> dict[str, Any]:
        """The typed flags the evidence does not carry yet (appended: the JSON's key order stays)."""
        out: dict[str, Any] = {}
        if self.out_of_view and "out_of_view" not in evidence:
            out["out_of_view"] = True
        if self.needs_confirm is not None and "needs_confirm" not in evidence:
            out["needs_confirm"] = self.needs_confirm
        return out

    @property
    def blocking(self) -> bool:
        return self.severity == "critical"

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for name in FLAGS + SEEN:
            del out[name]
        out["evidence"].update(self._flags(out["evidence"]))  # a flag set after it was made
        out["culprits"] = [c.to_dict() for c in self.culprits]
        return out

    @classmethod
    def from_dict(cls, raw: Any, where: str = "finding") -> Finding:
        obj = c.expect_dict(raw, where)
        # Fleet findings carry the layer of the deployment they judge; any string is kept as is.
        return cls(code=c.text(obj, "code", where), layer=c.text(obj, "layer", where),
                   severity=c.one_of(obj, "severity", SEVERITIES, where), node=c.text(obj, "node", where),
                   message=c.text(obj, "message", where), pids=c.ints(obj, "pids", where),
                   evidence=c.expect_dict(obj.get("evidence", {}), f"{where}.evidence"),
                   deployment=c.opt_text(obj, "deployment", where),
                   culprits=[Culprit.from_dict(x, f"{where}.culprits[{i}]")
                             for i, x in enumerate(c.expect_list(obj.get("culprits", []), f"{where}.culprits"))])


@dataclass
class Verdict:
    status: str
    layer: str | None = None
    culprits: list[Culprit] = field(default_factory=list)
    summary: str = ""
    evidence: list[str] = field(default_factory=list)
    next_steps: list[str] = field(default_factory=list)
    confidence: str = "high"

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "layer": self.layer,
            "culprits": [c.to_dict() for c in self.culprits],
            "summary": self.summary,
            "evidence": list(self.evidence),
            "next_steps": list(self.next_steps),
            "confidence": self.confidence,
        }

    @classmethod
    def from_dict(cls, raw: Any, where: str = "verdict") -> Verdict:
        obj = c.expect_dict(raw, where)
        return cls(status=c.one_of(obj, "status", VERDICT_STATUSES, where), layer=c.opt_text(obj, "layer", where),
                   culprits=[Culprit.from_dict(x, f"{where}.culprits[{i}]")
                             for i, x in enumerate(c.expect_list(obj.get("culprits", []), f"{where}.culprits"))],
                   summary=c.text(obj, "summary", where, ""), evidence=c.texts(obj, "evidence", where),
                   next_steps=c.texts(obj, "next_steps", where),
                   confidence=c.one_of(dict(obj, confidence=obj.get("confidence", "high")), "confidence", CONFIDENCES,
                                       where))
