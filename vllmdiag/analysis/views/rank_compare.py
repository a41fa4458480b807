"""Ranks compared within a group (pure, never a finding): TP groups, the collective the majority waits
in and the odd ranks out of it, rank names folded (``TP0-3``), each rank's GPU and whether it spins, and
which deployments moved. Read by the gpu-layer analyzers and the cross-node ones."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.views import nvml_pids
from vllmdiag.analysis.views.deployments import display_title, role_of
from vllmdiag.analysis.views.moe_step import ep_op
from vllmdiag.analysis.views.progress import Progress
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.model import Finding, Snapshot
from vllmdiag.vocab.stack_classes import COLLECTIVE, COMPILING

SPIN_UTIL_PCT, SPIN_POWER_FRACTION = 95, 0.6  # busy-wait kernels keep SMs "utilized" without drawing full power
GroupKey = tuple[int, int, int]
LONG_PHASE = (COMPILING,)


@dataclass
class OddRank:
    rank: int
    pid: int | None
    kind: str  # straggler | mismatch | missing
    cls: StackClass | None


@dataclass
class GroupCompare:
    op: str | None  # the collective the majority waits in
    waiting: list[int] = field(default_factory=list)
    odd: list[OddRank] = field(default_factory=list)


def moving_deployments(progress: Iterable[Progress]) -> set[str]:
    """Deployments whose output counters moved while we looked: an odd picture held across
    a 0.3 s resample there is a step in passing on a starved CPU, not a hang (seen on a 2-core host
    at load 14: TP1 twice in its forward while TP0 waited, tokens 34 -> 43 meanwhile)."""
    from vllmdiag.analysis.views.progress import COUNTERS

    # Only output counters count: a ring or stack change may be the last step before the hang.
    counters = tuple(k.replace("_", " ") for k in COUNTERS)
    return {p.deployment_id for p in progress if any(m.startswith(counters) for m in p.moved_what)}


def seen_moving_deployments(progress: Iterable[Progress]) -> set[str]:
    """Deployments seen moving by any evidence (counters, ring flags, stacks) over the window: weaker than
    ``moving_deployments``, enough to read a picture nobody looked at twice as one in passing."""
    return {p.deployment_id for p in progress if p.moved}


def in_passing(found: list[Finding]) -> None:
    """One-sample pictures (warnings: no second look, the budget had none left) of a deployment seen
    moving are most likely a step in passing: kept as information, never a warning that calls a busy
    deployment degraded (a loaded real TP=2 server, CI). Read by the TP and the DP/EP/PP comparisons."""
    for f in found:
        if f.severity == "warning":
            f.severity = "info"
            f.message = f.message.replace(" (one sample)", " (one sample, while the deployment was seen moving: "
                                          "most likely a step in passing)")
            f.evidence["seen_moving"] = True


# ---- rank groups -------------------------------------------------------------------------------
def tp_groups(procs: list[dict[str, Any]]) -> dict[GroupKey, dict[int, dict[str, Any]]]:
    """Workers by (dp, pp, pcp), then TP rank; zombies run nothing and are the process layer's."""
    out: dict[GroupKey, dict[int, dict[str, Any]]] = {}
    for p in procs:
        ranks = p.get("ranks") or {}
        if role_of(p) == "worker" and "tp" in ranks and p.get("state") not in ("Z", "X"):
            key = (int(ranks.get("dp", p.get("dp_engine") or 0)), int(ranks.get("pp", 0)), int(ranks.get("pcp", 0)))
            out.setdefault(key, {})[int(ranks["tp"])] = p
    return out


def compare_group(members: dict[int, dict[str, Any]], classes: dict[int, StackClass], size: int | None = None
                  ) -> GroupCompare | None:
    """The odd ranks of one group, or None when no clear majority waits in one collective."""
    by_rank = {r: classes.get(p["pid"]) for r, p in members.items()}
    ops = Counter(c.op or "?" for c in by_rank.values() if c is not None and c.name == COLLECTIVE)
    if not ops:
        return None
    (op, count), *rest = ops.most_common()
    if rest and rest[0][1] == count:
        tied = [o for o, n in ops.items() if n == count]
        if "all_reduce" not in tied:  # two equal camps of rare ops name no culprit
            return None
        # all_reduce is the op a TP forward runs many times per layer; the rank found in a rarer op
        # (all_gather of the logits, a broadcast) is the likelier one to have diverged (TP=2 ties).
        op = "all_reduce"
    res = GroupCompare(None if op == "?" else op)
    total = max(size or 0, max(members) + 1)
    for rank in range(total):
        c, proc = by_rank.get(rank), members.get(rank)
        if c is not None and c.name == COLLECTIVE and (c.op or "?") == op:
            res.waiting.append(rank)
        elif proc is None or c is None:
            res.odd.append(OddRank(rank, proc["pid"] if proc else None, "missing", None))
        else:
            res.odd.append(OddRank(rank, proc["pid"], "mismatch" if c.name == COLLECTIVE else "straggler", c))
    if any(o.cls is not None and o.cls.name in LONG_PHASE for o in res.odd):
        return None  # a rank compiling (or capturing graphs) arrives when done: never a straggler for it
    in_moe = {ep_op(c) is not None for c in by_rank.values() if c is not None and c.name == COLLECTIVE}
    if len(in_moe) > 1:
        # Some ranks wait in the MoE all2all of their EP group (with vLLM's default backend an
        # all_gatherv over DP x TP), others in a TP collective: two groups, no TP mismatch. The EP
        # comparison (gpu_groups) names who the EP group waits for.
        return None
    # The waiters must be the majority, or face a single rank (TP=2): otherwise no rank is "the odd one".
    return res if res.odd and (len(res.waiting) > len(res.odd) or len(res.odd) == 1) else None
_ONE_NUMBER = re.compile(r"([A-Za-z_]+)(0|[1-9][0-9]*)")


def fold(names: list[str]) -> str:
    """``TP[0-2,4-7]``: ClusterShell folding when installed (the node-side collector may lack it).
    The common shape (one prefix, one unpadded number: TP0..TP7) folds here, as ClusterShell folds it
    (tests/unit/test_gpu_fold.py), without its ~12 ms import on every triage."""
    found = [_ONE_NUMBER.fullmatch(n) for n in names]
    if names and all(found) and len({m.group(1) for m in found if m}) == 1:
        nums = sorted({int(m.group(2)) for m in found if m})
        return found[0].group(1) + (str(nums[0]) if len(nums) == 1 else f"[{_spans(nums)}]")  # type: ignore[union-attr]
    try:
        from ClusterShell.NodeSet import NodeSet

        return str(NodeSet.fromlist(names))
    except (ImportError, ValueError):
        return ",".join(names)


def _spans(nums: list[int]) -> str:
    out, lo = [], 0
    for i in range(1, len(nums) + 1):
        if i == len(nums) or nums[i] != nums[i - 1] + 1:
            out.append(str(nums[lo]) if lo == i - 1 else f"{nums[lo]}-{nums[i - 1]}")
            lo = i
    return ",".join(out)


def rank_name(proc: dict[str, Any]) -> str:
    """``TP3``, ``DP1_TP3``: the worker's title suffix without ``Worker_``."""
    name = str(proc.get("name") or display_title(proc).split("::")[-1])
    if name == "Worker" and isinstance(proc.get("dp_engine"), int):  # dense DP: the DP rank its engine serves
        return f"DP{proc['dp_engine']}'s worker"
    if name == "Worker" and "tp" in (proc.get("ranks") or {}):  # TP=1's lone worker: its rank is implied
        return f"TP{proc['ranks']['tp']}"
    short = name.split("Worker_", 1)[-1] if "Worker_" in name else name or str(proc.get("pid"))
    return f"DP{proc['dp_engine']}_{short}" if isinstance(proc.get("dp_engine"), int) else short


def gpu_by_pid(snapshot: Snapshot) -> dict[int, dict[str, Any]]:
    """pid -> the GPU it computes on. NVML reports host pids (vllm-internals 7): nvml_pids maps them
    to our pids, inside a pod through device nodes, and leaves out what it cannot tie honestly."""
    return nvml_pids.gpu_by_pid(snapshot.data("nvml"), snapshot.data("processes").get("processes") or [])


def spinning(g: dict[str, Any] | None) -> bool:
    if not g or g.get("util_pct") is None or g["util_pct"] < SPIN_UTIL_PCT:
        return False
    power, limit = g.get("power_w"), g.get("power_limit_w")
    return power is not None and limit is not None and limit > 0 and power < SPIN_POWER_FRACTION * limit
