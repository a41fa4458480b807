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

    def __post_init__(self) -> None:
        if "out_of_view" in self.evidence:
            self.out_of_view = self.out_of_view or bool(self.evidence["out_of_view"])
        if self.needs_confirm is None and isinstance(self.evidence.get("needs_confirm"), bool):
            self.needs_confirm = self.evidence["needs_confirm"]
        self.evidence.update(self._flags(self.evidence))

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
        for flag in FLAGS:
            del out[flag]
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
