"""Start-up as a state of its own: starting and moving, one rank held while its peers wait for it, or the
whole start-up held (pure; the picture is views/startup_progress.py).

A deployment whose engine has not reported ready is never healthy nor idle: "Healthy: processes alive,
ranks agree. Idle" was said 4 of 4 times of a real TP=2 start-up whose rank 1 never finished loading
(issue 33). The verdict reads ``handshake.starting`` (info) as the status ``starting``; a held start-up is
critical here and leads the verdict with the rank the others wait for.
"""

from __future__ import annotations

from dataclasses import replace

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import Deployment
from vllmdiag.analysis.views.progress import HELD_S
from vllmdiag.analysis.views.rank_compare import fold
from vllmdiag.analysis.views.startup_progress import StartupPicture, startup_picture
from vllmdiag.model import Culprit, Finding, Snapshot

LAYER = "handshake"
CODES = ("handshake.starting", "handshake.startup_rank_held", "handshake.startup_stuck")


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    out = []
    for dep in deployments:
        pic = startup_picture(snapshot, dep)
        if pic is not None:
            out.append(_judge(snapshot, dep, pic))
    return out


def _judge(snap: Snapshot, dep: Deployment, pic: StartupPicture) -> Finding:
    evidence = {"since_s": pic.since_s, "window_s": pic.window_s, "phases": pic.phases(),
                "http_listening": pic.http_listening,
                "ranks": [{"pid": r.pid, "name": r.name, "phase": r.phase, "where": r.where, "looks": r.looks,
                           "moved": r.moved} for r in pic.ranks]}
    head = f"Starting ({pic.since_s:.0f} s since start; phase {pic.phase_text()})"
    if pic.moving:
        what = "; ".join(f"{r.name} {', '.join(r.moved)}" for r in pic.moving[:6])
        return finding("handshake.starting", LAYER, "info", snap, dep,
                       f"{head}: moving over {pic.window_s:.1f} s ({what}).", [], {**evidence, "moving": True}, [])
    held = pic.held
    if held:
        return _held(snap, dep, pic, held, head, evidence)
    if pic.window_s >= HELD_S and pic.ranks and all(r.waits for r in pic.ranks):
        return _all_waiting(snap, dep, pic, head, evidence)
    # Not looked at long enough to tell a slow start-up from a stuck one: the confirm window decides.
    why = (f"nothing seen moving in {pic.window_s:.1f} s (a start-up is called held after {HELD_S:.0f} s; "
           "triage --confirm S)" if pic.window_s < HELD_S else
           f"nothing seen moving in {pic.window_s:.1f} s, and no rank in a known working phase to call held")
    return finding("handshake.starting", LAYER, "info", snap, dep, f"{head}: {why}.", [],
                   {**evidence, "moving": False, "needs_confirm": pic.window_s < HELD_S}, [])


def _held(snap: Snapshot, dep: Deployment, pic: StartupPicture, held: list, head: str,
          evidence: dict) -> Finding:
    waiting = pic.waiting
    names = fold([r.name for r in held]) if len(held) > 1 else held[0].name
    peers = f" while {', '.join(r.name for r in waiting)} wait{'s' if len(waiting) == 1 else ''} for it" \
        if waiting else ""
    where = "; ".join(f"{r.name} in {r.phase} at {r.where}" for r in held[:4])
    msg = (f"Start-up held: {where}, nothing moved in {pic.window_s:.1f} s (stack, CPU time and reads all still)"
           f"{peers}. {head}.")
    culprits = [culprit(snap, p, f"held in {r.phase} at {r.where} for {pic.window_s:.0f} s{peers}")
                for r in held if (p := dep.by_pid(r.pid)) is not None]
    code = "handshake.startup_rank_held" if waiting else "handshake.startup_stuck"
    return finding(code, LAYER, "critical", snap, dep, msg, [r.pid for r in held],
                   {**evidence, "held": [r.name for r in held], "held_group": names}, culprits)


def _all_waiting(snap: Snapshot, dep: Deployment, pic: StartupPicture, head: str, evidence: dict) -> Finding:
    group = ", ".join(r.name for r in pic.ranks)
    places = sorted({f"{r.phase} at {r.where}" for r in pic.ranks})
    beyond = int(dep.configured.get("nnodes") or 1) > 1 or dep.headless
    tail = (" Its peers on the other node(s) are the likelier holders: sweep the nodes together." if beyond else "")
    msg = (f"Start-up stuck: every rank waits ({'; '.join(places[:4])}) and nothing moved in {pic.window_s:.1f} s."
           f"{tail} {head}.")
    reason = f"every rank of the start-up waits, nothing moved for {pic.window_s:.0f} s"
    blame = [Culprit(snap.node, None, "rank_group", None, group, reason),
             *[culprit(snap, p, reason) for r in pic.ranks if (p := dep.by_pid(r.pid)) is not None]]
    f = finding("handshake.startup_stuck", LAYER, "critical", snap, dep, msg, [r.pid for r in pic.ranks],
                {**evidence, "beyond_this_node": beyond}, blame)
    return replace(f, out_of_view=beyond)  # the typed flag; its evidence says it too (the JSON's copy)


def keeps_window_open(facts: Facts, deployment_ids: set[str]) -> bool:
    """The confirm window stays open while a start-up has been seen neither moving nor held."""
    for dep in facts.all_deployments:
        if dep.id in deployment_ids:
            pic = startup_picture(facts.snapshot, dep)
            if pic is not None and pic.ranks and not pic.moving and not pic.held \
                    and not (pic.window_s >= HELD_S and all(r.waits for r in pic.ranks)):
                return True
    return False


def second_look_pids(facts: Facts) -> list[int]:
    """Working ranks of a start-up: a second stack look tells a load in progress from a held one at once."""
    from vllmdiag.analysis.views.startup_progress import SERVING, WORKING

    out = []
    for dep in facts.deployments:
        phases = {pid: c.name for pid, c in facts.classes.items() if pid in dep.pids}
        if phases and not any(n in SERVING for n in phases.values()):
            out += [pid for pid, n in phases.items() if n in WORKING]
    return out
