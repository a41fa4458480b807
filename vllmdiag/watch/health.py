"""``/readyz`` and ``/livez`` of the watcher (pure): what a load balancer and a kubelet ask, answered
from progress, not from a process being alive.

vLLM's own ``/health`` answers 200 while the engine is frozen (it checks that the engine process
lives). Here:

- ``/readyz`` is 200 while every watched deployment serves: its API server has answered ``/metrics``
  (a GET timing out on a loaded node later does not undo that) and it was seen moving or idle;
  503 while it starts (API not answering yet), is suspect, stalled, paused by fault tolerance, or gone.
  A load balancer takes traffic away at once.
  A blind pass (the watcher could not read what shows movement) keeps the API's answer: the
  watcher's own blindness must not take a serving replica out of rotation.
- ``/livez`` is 503 only for a stall a triage confirmed as ``blocked`` *whose evidence is on disk*
  (snapshot and report written and fsynced), so the restart it triggers loses nothing; when saving
  fails or hangs it is 503 all the same ``save_grace_s`` after the confirmation (a full disk must
  not keep a hung server alive). Never for a start-up, an idle server, a blind pass, a paused engine,
  nor a deployment that is gone for less than ``gone_grace_s`` (a restart in progress).

The body is one line: the answer, the deployment, its state, the last triage's verdict, layer and
culprit (role, pid, rank: never a title or command line), since when, and the evidence path.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from vllmdiag.watch.state import Tracked

GONE_GRACE_S = 300.0  # --gone-grace: a vLLM restart (weights, compile) takes minutes, not longer
SAVE_GRACE_S = 30.0  # after a confirmed stall, /livez fails by then even if the evidence is not saved
LIVE_FAIL = ("blocked",)  # only a named layer that stops the flow; never degraded or inconclusive


@dataclass(frozen=True)
class View:
    """The watcher's state copied under its lock (the exporter thread never waits for a pass)."""

    deps: list[Tracked]
    passes: int
    last_seen: float  # monotonic: a watched deployment was last seen (or the watcher started)
    started: float
    gone: dict[str, float]  # deployment id -> when it went away
    now: float  # monotonic
    wall: float  # time.time() at ``now``
    gone_grace_s: float = GONE_GRACE_S
    save_grace_s: float = SAVE_GRACE_S


@dataclass(frozen=True)
class Answer:
    code: int
    line: str


def readyz(v: View, deployment: str | None = None) -> Answer:
    deps, missing = _pick(v, deployment)
    if missing is not None:
        return Answer(503, missing)
    answers = [_ready_one(v, t) for t in deps]
    return _worst(answers)


def livez(v: View, deployment: str | None = None) -> Answer:
    deps, missing = _pick(v, deployment)
    if missing is not None:
        since = _gone_since(v, deployment)
        if v.now - since >= v.gone_grace_s:
            return Answer(503, f"{missing}; gone past --gone-grace {v.gone_grace_s:g} s")
        return Answer(200, f"{missing}; not a hang: a restart has {v.gone_grace_s - (v.now - since):.0f} s "
                           f"of --gone-grace left")
    return _worst([_live_one(v, t) for t in deps])


def _pick(v: View, deployment: str | None) -> tuple[list[Tracked], str | None]:
    if v.passes == 0:
        return [], "starting: the watcher's first pass is not done"
    deps = [t for t in v.deps if deployment is None or t.deployment_id == deployment]
    if deps:
        return deps, None
    since = _gone_since(v, deployment)
    who = f"deployment {deployment}" if deployment else "no watched deployment"
    return [], f"no-deployment: {who} seen since {_iso(v, since)} ({v.now - since:.0f} s)"


def _gone_since(v: View, deployment: str | None) -> float:
    if v.passes == 0:
        return v.now
    if deployment is None:
        return v.last_seen
    return v.gone.get(deployment, v.started)


def _ready_one(v: View, t: Tracked) -> Answer:
    if t.state in ("suspect", "stalled", "paused"):
        why = {"suspect": "not seen moving with work in flight (a triage is confirming)",
               "stalled": "stalled with work in flight", "paused": "engine paused by fault tolerance"}[t.state]
        return Answer(503, _line(v, t, why))
    if not t.api_up:
        return Answer(503, _line(v, t, "starting: the API server does not answer /metrics yet"))
    if t.state == "unknown":
        return Answer(200, _line(v, t, f"serving (API answers); progress not seen: {t.blind}"))
    if not t.seen_ok:
        return Answer(503, _line(v, t, "starting: not yet seen moving or idle"))
    return Answer(200, _line(v, t, "serving"))


def _live_one(v: View, t: Tracked) -> Answer:
    if t.state != "stalled" or t.confirmed_at is None:
        why = {"paused": "engine paused by fault tolerance: waits for an instruction, not a hang",
               "unknown": "progress not seen (blind pass): unknown is not dead",
               "suspect": "suspect: a triage is confirming"}.get(t.state, t.state)
        return Answer(200, _line(v, t, why))
    status = str(t.verdict.get("status"))
    if status not in LIVE_FAIL:
        return Answer(200, _line(v, t, f"stall judged {status}, not blocked: no restart on it"))
    waited = v.now - t.confirmed_at
    if _part_gone(t) and waited < v.gone_grace_s:
        # A process of it is missing (an EngineCore gone while its API server shuts down): a restart or a stop in
        # progress reads so for a pass (seen on the real server's restart under load); the next pass finds it
        # gone. Like a deployment gone, it fails liveness only if it stays so past the grace.
        return Answer(200, _line(v, t, f"part of it is gone (a restart or stop in progress?): 503 if it stays so "
                                       f"past --gone-grace ({v.gone_grace_s - waited:.0f} s left)"))
    if t.saved_at is not None:
        return Answer(503, _line(v, t, "stalled, evidence saved"))
    if waited >= v.save_grace_s:
        return Answer(503, _line(v, t, f"stalled; evidence NOT saved after {waited:.0f} s (see the watcher's log)"))
    return Answer(200, _line(v, t, f"stalled; saving the evidence first ({v.save_grace_s - waited:.0f} s at most)"))


def _part_gone(t: Tracked) -> bool:
    """The stall's verdict blames a process that no longer exists (process layer, a culprit without a pid)."""
    culprits = t.verdict.get("culprits") or []
    return t.verdict.get("layer") == "process" and any(isinstance(c, dict) and c.get("pid") is None for c in culprits)


def _worst(answers: list[Answer]) -> Answer:
    bad = [a for a in answers if a.code != 200]
    pick = bad[0] if bad else answers[0]
    more = f" (+{len(answers) - 1} more deployment(s))" if len(answers) > 1 else ""
    return Answer(pick.code, pick.line + more)


def _line(v: View, t: Tracked, why: str) -> str:
    verdict = t.verdict or {}
    culprit = (verdict.get("culprits") or [{}])[0] or {}
    who = "-"
    if culprit:
        who = f"{culprit.get('role') or '?'}/pid={culprit.get('pid')}/rank={culprit.get('rank')}"
    since = t.stalled_wall if t.state == "stalled" and t.stalled_wall else v.wall - (v.now - t.changed_at)
    text = (f"{why} | deployment={t.deployment_id} state={t.state} verdict={verdict.get('status') or '-'} "
            f"layer={verdict.get('layer') or '-'} culprit={who} since={_stamp(since)} "
            f"({max(0.0, v.wall - since):.0f} s) evidence={t.evidence or '-'}")
    return clean(text)


def _iso(v: View, mono: float) -> str:
    return _stamp(v.wall - (v.now - mono))


def _stamp(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def clean(text: str) -> str:
    """One printable line, bounded: ids and paths come from the target's node name."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:600]
