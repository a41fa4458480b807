"""The second stack look (vllmdiag/runtime/second_look.py resamples odd ranks): each resampled process's class, and
whether a picture held between the two looks. Shared by the gpu, queue and fleet analyzers (pure)."""

from __future__ import annotations

from vllmdiag.analysis.views.stack_match import StackClass, classify_threads
from vllmdiag.model import Snapshot


def resampled_classes(snapshot: Snapshot) -> dict[int, StackClass]:
    """pid -> its latest later look: the resample, then the confirm window's passes (the last one wins),
    so a picture that held over the whole window counts as held."""
    roles = {p["pid"]: p.get("role") for p in snapshot.data("processes").get("processes", [])}
    out = {int(d["pid"]): classify_threads(d["resample"]["threads"], roles.get(d["pid"]))
           for d in snapshot.data("stacks").get("dumps", []) if (d.get("resample") or {}).get("threads")}
    for later in snapshot.passes:
        for d in later.data("stacks").get("dumps", []) or []:
            if isinstance(d, dict) and d.get("threads") and d.get("pid") in roles:
                out[int(d["pid"])] = classify_threads(d["threads"], roles.get(d["pid"]))
    return out


def held(pid: int | None, first: StackClass | None, again: dict[int, StackClass]) -> bool | None:
    """True: the second sample shows the same class and place; False: it moved; None: no second sample."""
    if pid is None or pid not in again:
        return None
    second = again[pid]
    return first is None or (second.label == first.label and second.where == first.where)
