"""What a node's report draws of its deployment over time (issue 26): the rank strip (one cell per rank:
its stack class, the culprit marked) and the timeline of the passes (when each rank, ring and counter was
looked at and when it last moved). Analysis computes them (analysis/reporting.py); render only draws."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.model import _check as c

TIMELINE_KINDS = ("rank", "ring", "counter")


@dataclass
class RankCell:
    """One rank (a worker; the EngineCore where the model runs in it, TP=1) as its last stack look saw it."""

    label: str  # TP3, DP1_TP3, EngineCore
    pid: int
    stack_class: str | None = None  # None: no stack of it was read
    culprit: bool = False
    state: str | None = None  # /proc state letter

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "pid": self.pid, "stack_class": self.stack_class, "culprit": self.culprit,
                "state": self.state}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> RankCell:
        obj = c.expect_dict(raw, where)
        culprit = obj.get("culprit", False)
        if not isinstance(culprit, bool):
            raise c.SnapshotError(f"{where}.culprit: expected true or false")
        return cls(label=c.text(obj, "label", where), pid=c.integer(obj, "pid", where),
                   stack_class=c.opt_text(obj, "stack_class", where), culprit=culprit,
                   state=c.opt_text(obj, "state", where))


@dataclass
class TimelineRow:
    """One thing looked at: the times (s since the first pass began) it was looked at, and those at which it
    had changed since the look before. Never moved in the window: ``moved`` is empty."""

    kind: str  # rank | ring | counter
    name: str
    looks: list[float] = field(default_factory=list)
    moved: list[float] = field(default_factory=list)

    @property
    def last_moved_s(self) -> float | None:
        return max(self.moved) if self.moved else None

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "name": self.name, "looks": list(self.looks), "moved": list(self.moved)}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> TimelineRow:
        obj = c.expect_dict(raw, where)
        return cls(kind=c.one_of(obj, "kind", TIMELINE_KINDS, where), name=c.text(obj, "name", where),
                   looks=_seconds(obj, "looks", where), moved=_seconds(obj, "moved", where))


@dataclass
class Timeline:
    """The passes over one deployment: when each began and how long they spanned, and one row per thing looked at."""

    window_s: float = 0.0
    passes: list[float] = field(default_factory=list)  # when each pass began, s since the first
    rows: list[TimelineRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"window_s": self.window_s, "passes": list(self.passes), "rows": [r.to_dict() for r in self.rows]}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> Timeline:
        obj = c.expect_dict(raw, where)
        rows = c.expect_list(obj.get("rows", []), f"{where}.rows")
        return cls(window_s=c.number(obj, "window_s", where), passes=_seconds(obj, "passes", where),
                   rows=[TimelineRow.from_dict(r, f"{where}.rows[{i}]") for i, r in enumerate(rows)])


def _seconds(obj: dict[str, Any], key: str, where: str) -> list[float]:
    items = c.expect_list(obj.get(key, []), f"{where}.{key}")
    if not all(isinstance(i, (int, float)) and not isinstance(i, bool) for i in items):
        raise c.SnapshotError(f"{where}.{key}: expected a list of numbers")
    return [float(i) for i in items]
