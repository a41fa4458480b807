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
# paused: a triage found the engine paused by vLLM's fault tolerance (alive, waiting for an instruction).
STATES = ("idle", "running", "suspect", "stalled", "unknown", "paused")


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
    # What /readyz and /livez read (vllmdiag.watch.health): the API server has answered /metrics
    # (listening and serving: start-up is over), it was seen moving or idle at least once since it appeared,
    # the engine is paused by vLLM's fault tolerance (not a hang), and a stall's confirmation and
    # evidence times (monotonic) with the wall time it stopped moving.
    api_up: bool = False
    seen_ok: bool = False
    paused: bool = False
    confirmed_at: float | None = None
    saved_at: float | None = None
    stalled_wall: float = 0.0
    evidence: str = ""
    changed_at: float = 0.0  # monotonic time of the last change of state (the probes' "since")
    # Client connections open on its API server's HTTP port (local>remote): requests in flight that
    # vLLM's own gauges may not show (set from the engine's step stats, a forward that never returns
    # leaves them at their last value, often 0). Those a triage found idle (a keep-alive pool) are
    # vouched for until tokens move again, so an idle pool costs one triage, not one per pass.
    clients: frozenset[str] = frozenset()
    cleared_clients: frozenset[str] = frozenset()

    def since_progress(self, now: float) -> float:
        return max(0.0, now - self.last_progress) if self.state in ("suspect", "stalled") else 0.0


@dataclass
class Event:
    kind: str  # new | gone | suspect | recovered | unknown
    tracked: Tracked


PAUSED_CODE = "process.engine_paused"  # a finding: the engine waits for an instruction (fault tolerance)
NOT_A_STALL = ("healthy", "starting")
NOT_CONFIRMED = ("no-deployment", "inconclusive")
GONE_KEPT = 64
PAST_KEPT = 16  # a triage saw it move: a long step, or a start-up that moves


class Tracker:
    def __init__(self, now: float = 0.0) -> None:
        self.deps: dict[str, Tracked] = {}
        # When a watched deployment was last seen (or the watcher started): a node with none for
        # longer than --gone-grace fails /livez; a restart in progress does not.
        self.last_seen = self.started = now
        self.passes = 0
        self.gone: dict[str, float] = {}  # deployment id -> when it went away (the last GONE_KEPT)
        # Deployments that stalled and then went away (a restart, the kubelet's): `triage` after the
        # restart still learns when the stall began and where its evidence is (the last PAST_KEPT).
        self.past: list[Tracked] = []

    def observe(self, seen: dict[str, tuple[str, int]], within: dict[str, Progress],
                across: dict[str, Progress], now: float, prev_at: float | None,
                blind: dict[str, str] | None = None, api: dict[str, bool] | None = None,
                clients: dict[str, frozenset[str]] | None = None) -> list[Event]:
        """One cheap pass. ``seen``: key -> (deployment id, root pid); ``within``: progress inside
        this pass; ``across``: progress from the previous pass to this one (empty on the first);
        ``blind``: deployment id -> why the pass could not see whether it moves; ``api``: deployment
        id -> its API server answered /metrics in this pass; ``clients``: deployment id -> client
        connections open on its HTTP port."""
        events: list[Event] = []
        self.passes += 1
        if seen:
            self.last_seen = now
        for key in [k for k in self.deps if k not in seen]:
            events.append(Event("gone", self.deps.pop(key)))
            self.gone[events[-1].tracked.deployment_id] = now
            if events[-1].tracked.stalls:
                events[-1].tracked.state = "gone"
                self.past = [*self.past, events[-1].tracked][-PAST_KEPT:]
            while len(self.gone) > GONE_KEPT:
                self.gone.pop(next(iter(self.gone)))
        for key, (dep_id, root) in seen.items():
            t = self.deps.get(key)
            if t is None:
                t = self.deps[key] = Tracked(key, dep_id, root, now, changed_at=now)
                events.append(Event("new", t))
            was = t.state
            p_in, p_x = within.get(dep_id), across.get(dep_id)
            t.clients = (clients or {}).get(dep_id, frozenset())
            if (p_in is not None and p_in.moved) or (p_x is not None and p_x.moved):
                t.cleared_clients = frozenset()
            waiting = bool(t.clients - t.cleared_clients)
            kind = _step(t, p_in, p_x, now, prev_at, (blind or {}).get(dep_id, ""), waiting)
            # Sticky: once its API answered, a /metrics GET timing out on a loaded node is no reason to take
            # it out of rotation (a hang is judged by progress; a dead server goes away as a deployment).
            t.api_up = t.api_up or bool((api or {}).get(dep_id))
            if t.state != was:
                t.changed_at = now
            t.seen_ok = t.seen_ok or t.state in ("idle", "running")
            if t.state != "stalled":  # over (it moved or went idle): /livez passes again
                t.confirmed_at = t.saved_at = None
            if kind:
                events.append(Event(kind, t))
        return events

    def confirmed(self, t: Tracked, verdict: dict[str, Any], now: float | None = None, wall: float | None = None,
                  paused: bool = False) -> bool:
        """Record a triage's answer for a suspect; True when it is a stall to report. ``paused``: the
        triage found the engine paused by fault tolerance: not a stall, never a restart."""
        t.verdict = verdict
        if paused:
            t.state, t.paused, t.cleared = "paused", True, True
            t.changed_at = now if now is not None else t.changed_at
            return False
        if verdict.get("status") in NOT_A_STALL:  # it moved while the triage looked (or it is idle)
            t.state, t.cleared, t.cleared_clients = "running", True, t.clients
            return False
        if verdict.get("status") in NOT_CONFIRMED:  # gone while it looked (the next pass says so), or it could
            return False  # not see: unknown is not dead, and neither is a stall to restart for or to remember
        t.state, t.stalls = "stalled", t.stalls + 1
        if now is not None:
            t.changed_at, t.confirmed_at, t.saved_at, t.evidence = now, now, None, ""
            t.stalled_wall = (wall if wall is not None else 0.0) - max(0.0, now - t.last_progress)
        return True

    def saved(self, t: Tracked, now: float, evidence: str) -> None:
        """The stall's snapshot and report are on disk (written and fsynced): /livez may fail now."""
        t.saved_at, t.evidence = now, evidence


def _step(t: Tracked, p_in: Progress | None, p_x: Progress | None, now: float, prev_at: float | None,
          blind: str = "", waiting: bool = False) -> str | None:
    was = t.state
    moved = p_in is not None and (p_in.moved or (p_x is not None and p_x.moved))
    if blind and not moved:  # seen moving is seen; anything less from a blind pass is unknown
        changed = was != "unknown" or blind != t.blind
        t.state, t.blind, t.last_progress = "unknown", blind, now
        return "unknown" if changed else None
    t.blind = ""
    if was == "paused" and not moved:
        return None  # it waits for an instruction: no triage until it moves again
    t.paused = False
    if p_in is None or not (p_in.work_in_flight or waiting):
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
    if t.cleared and not (p_x is not None and (is_stalled(p_x) or (waiting and not p_x.moved))):
        t.state = "suspect"
        return None
    t.state = "suspect"
    return "suspect"
