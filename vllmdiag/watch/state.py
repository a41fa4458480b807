"""Per-deployment watch state (pure): when to triage, when a stall is over, what to export.

A deployment is keyed by its root pid and that process's start time, so a restarted deployment
(same pid reused or not) is a new one and its state starts fresh. A stall is triaged once; the
next triage needs the deployment to move (or go idle) first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.views.progress import Progress, is_stalled

# unknown: the pass could not read what would show it moving (fds, maps, rings: issue 25 item 3);
# never idle, never healthy, and no triage is opened on it (it would be as blind).
STATES = ("idle", "running", "suspect", "stalled", "unknown")


@dataclass
class Tracked:
    key: str  # "<node>:<root pid>@<root start time>"
    deployment_id: str  # the analysis' id ("<node>:<root pid>")
    root_pid: int
    last_progress: float  # monotonic time it last moved (or was idle: nothing to move)
    state: str = "idle"
    stalls: int = 0
    # A triage found it moving after a short suspicion (a long step, a slow stream): from then on
    # only a stall over a whole interval (two passes) opens a triage, so a slow deployment costs one.
    cleared: bool = False
    verdict: dict[str, Any] = field(default_factory=dict)  # the last triage's deployment verdict
    blind: str = ""  # while unknown: what the pass could not read, and the fix

    def since_progress(self, now: float) -> float:
        return max(0.0, now - self.last_progress) if self.state in ("suspect", "stalled") else 0.0


@dataclass
class Event:
    kind: str  # new | gone | suspect | recovered | unknown
    tracked: Tracked


class Tracker:
    def __init__(self) -> None:
        self.deps: dict[str, Tracked] = {}

    def observe(self, seen: dict[str, tuple[str, int]], within: dict[str, Progress],
                across: dict[str, Progress], now: float, prev_at: float | None,
                blind: dict[str, str] | None = None) -> list[Event]:
        """One cheap pass. ``seen``: key -> (deployment id, root pid); ``within``: progress inside
        this pass; ``across``: progress from the previous pass to this one (empty on the first);
        ``blind``: deployment id -> why the pass could not see whether it moves."""
        events: list[Event] = []
        for key in [k for k in self.deps if k not in seen]:
            events.append(Event("gone", self.deps.pop(key)))
        for key, (dep_id, root) in seen.items():
            t = self.deps.get(key)
            if t is None:
                t = self.deps[key] = Tracked(key, dep_id, root, now)
                events.append(Event("new", t))
            p_in, p_x = within.get(dep_id), across.get(dep_id)
            kind = _step(t, p_in, p_x, now, prev_at, (blind or {}).get(dep_id, ""))
            if kind:
                events.append(Event(kind, t))
        return events

    def confirmed(self, t: Tracked, verdict: dict[str, Any]) -> bool:
        """Record a triage's answer for a suspect; True when it is a stall to report."""
        t.verdict = verdict
        if verdict.get("status") == "healthy":  # it moved while the triage looked
            t.state, t.cleared = "running", True
            return False
        t.state, t.stalls = "stalled", t.stalls + 1
        return True


def _step(t: Tracked, p_in: Progress | None, p_x: Progress | None, now: float, prev_at: float | None,
          blind: str = "") -> str | None:
    was = t.state
    moved = p_in is not None and (p_in.moved or (p_x is not None and p_x.moved))
    if blind and not moved:  # seen moving is seen; anything less from a blind pass is unknown
        changed = was != "unknown" or blind != t.blind
        t.state, t.blind, t.last_progress = "unknown", blind, now
        return "unknown" if changed else None
    t.blind = ""
    if p_in is None or not p_in.work_in_flight:
        t.state, t.last_progress = "idle", now
        return "recovered" if was == "stalled" else None
    if p_in.moved or (p_x is not None and p_x.moved):
        # Moved inside this pass, or between the last pass and this one.
        t.last_progress = now if p_in.moved or prev_at is None else prev_at
        if p_in.moved or was == "stalled":
            t.state = "running"
            return "recovered" if was == "stalled" else None
    if was == "stalled":
        return None  # already reported: once per stall
    if t.cleared and not (p_x is not None and is_stalled(p_x)):
        t.state = "suspect"
        return None
    t.state = "suspect"
    return "suspect"
