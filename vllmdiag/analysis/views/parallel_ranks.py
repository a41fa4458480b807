"""Ranks of the parallel groups beyond TP (pure, never a finding): DP ranks and whether they split over the DP
sync, PP stages and which wait in recv on an upstream stage, and the deployments progress calls stalled.
Read by the gpu-layer analyzers (parallel_groups, dp_world, stall) and the cross-node DP world."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vllmdiag.analysis.views.deployments import role_of
from vllmdiag.analysis.views.progress import Progress
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.vocab.stack_classes import COLLECTIVE, DP_SYNC, ENGINE_DP_SYNC, ENGINE_IDLE, IDLE

SYNC = (DP_SYNC, ENGINE_DP_SYNC)
LIVE = ("Z", "X")
RESTING = (IDLE, ENGINE_IDLE)  # waiting for work: a rank found there twice stays out of the step


def stalled_deployments(progress: Iterable[Progress]) -> dict[str, float]:
    """Deployment id -> window (s) for those with work in flight and nothing moved for HELD_S or more."""
    from vllmdiag.analysis.views.progress import HELD_S, is_stalled

    return {p.deployment_id: p.window_s for p in progress if is_stalled(p) and p.window_s >= HELD_S}


def live_workers(procs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in procs if role_of(p) == "worker" and p.get("state") not in LIVE]


# ---- data parallel -----------------------------------------------------------------------------
def dp_ranks(procs: list[dict[str, Any]]) -> dict[int, list[dict[str, Any]]]:
    out: dict[int, list[dict[str, Any]]] = {}
    for p in procs:
        ranks = p.get("ranks") or {}
        if role_of(p) in ("worker", "engine_core") and "dp" in ranks and p.get("state") not in LIVE:
            out.setdefault(int(ranks["dp"]), []).append(p)
    return out


def dp_split(procs: list[dict[str, Any]], classes: dict[int, StackClass]) -> tuple[list[int], dict[int, list[dict[str, Any]]]]:
    """(DP ranks in the DP sync, the other DP ranks with their processes); empty when not split."""
    by_dp = dp_ranks(procs)
    if len(by_dp) < 2:
        return [], {}
    in_sync = [d for d, ps in by_dp.items() if any((c := classes.get(p["pid"])) is not None and c.name in SYNC for p in ps)]
    others = {d: ps for d, ps in by_dp.items() if d not in in_sync}
    if not in_sync or not others:
        return [], {}
    return sorted(in_sync), others


def dp_held(waiter: int, others: dict[int, list[dict[str, Any]]], again: dict[int, StackClass]) -> bool | None:
    """The split held when a later look still finds the waiter in the DP sync and each other DP rank
    still outside it (any of its processes looked at again, none in the sync; where exactly an idle
    or busy rank sits may change, that it stays out is what blocks the others)."""
    first = again.get(waiter)
    if first is None:
        return None
    if first.name not in SYNC:
        return False
    verdicts = []
    for ps in others.values():
        looks = [again[p["pid"]] for p in ps if p["pid"] in again]
        verdicts.append(None if not looks else not any(c.name in SYNC for c in looks))
    if any(v is False for v in verdicts):
        return False
    return True if all(verdicts) else None


def dp_blame(ps: list[dict[str, Any]], classes: dict[int, StackClass]) -> dict[str, Any]:
    """Where an out-of-step DP rank is: its first worker that is not idle, else its EngineCore."""
    busy = [p for p in ps if role_of(p) == "worker" and (c := classes.get(p["pid"])) is not None and c.name != IDLE]
    engines = [p for p in ps if role_of(p) == "engine_core"]
    return (busy or engines or ps)[0]


# ---- pipeline parallel -------------------------------------------------------------------------
# vLLM 0.33 (`Worker.execute_model`, gpu_worker.py): a stage after the first blocks in
# `get_pp_group().irecv_tensor_dict` -> `recv_object` -> torch `recv` on the CPU group until the stage
# before it sends; sends are non-blocking (`isend_tensor_dict`), so an upstream stage is seen in send
# only in passing. A stage mostly in recv whose upstream is not sending waits on that stage; a chain
# of such stages (PP=4: stages 1-3 in recv) waits on the first stage that is not in recv.
def pp_stages(procs: list[dict[str, Any]]) -> dict[tuple[int, int], list[dict[str, Any]]]:
    out: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for p in live_workers(procs):
        ranks = p.get("ranks") or {}
        if "pp" in ranks:
            out.setdefault((int(ranks.get("dp", 0)), int(ranks["pp"])), []).append(p)
    return out


def _in_op(ps: list[dict[str, Any]], classes: dict[int, StackClass], op: str) -> bool:
    cs = [classes.get(p["pid"]) for p in ps]
    return bool(cs) and sum(1 for c in cs if c is not None and c.name == COLLECTIVE and c.op == op) * 2 > len(cs)


def pp_blocked(procs: list[dict[str, Any]], classes: dict[int, StackClass]) -> list[tuple[int, int, list[int]]]:
    """(dp, stuck stage, the stages after it waiting in recv on it) for each chain found."""
    stages = pp_stages(procs)
    out = []
    for (dp, pp), ps in sorted(stages.items()):
        down: list[int] = []
        while _in_op(stages.get((dp, pp + 1 + len(down)), []), classes, "recv"):
            down.append(pp + 1 + len(down))
        if down and not _in_op(ps, classes, "recv") and not _in_op(ps, classes, "send"):
            out.append((dp, pp, down))
    return out


def pp_waiting_stages(procs: list[dict[str, Any]], classes: dict[int, StackClass]) -> set[tuple[int, int]]:
    """(dp, pp) of the stages that wait on an upstream stage: their uniform wait in recv is no hang of
    their own (gpu_progress leaves them to ``gpu.pp_stage_stuck``)."""
    return {(dp, s) for dp, _, down in pp_blocked(procs, classes) for s in down}
