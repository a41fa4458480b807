"""Second looks, driven by the orchestrator (probes collect, never decide; issue 16 item 2).

Two kinds, both stored in the snapshot so ``analyze`` of a saved file reaches the same verdict:
- **resample**: the few processes whose first stack picture would be a hang if it held (an odd rank
  out of a collective, a busy EngineCore with idle workers) are dumped again ``SETTLE_S`` later and
  the dump goes into the first pass as ``dumps[i].resample`` (the shape analysis always read).
- **confirm window**: work in flight and nothing moved in the quick pass -> follow-up passes of the
  cheap probes until something moves or ``confirm_s`` is over (``Snapshot.passes``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from vllmdiag.context import Context
from vllmdiag.model import Snapshot
from vllmdiag.runtime.options import CollectOptions, as_options
from vllmdiag.runtime.record import ConfirmWindow, note

SETTLE_S = 0.3  # a decode step takes 10-100 ms: a picture still there 0.3 s later is not in passing
PASS_PROBES = ["processes", "shm", "rings", "sockets", "http", "stacks"]
PASS_GAP_S = 0.5  # between follow-up starts: ~20 passes in a 10 s window
PASS_BUDGET_S = 3.0
MIN_RESAMPLE_S = 0.3  # a resample's collector needs this much to start py-spy and read a few stacks
MIN_PASS_S = 0.5  # a shorter pass sees too little (rings sample every 0.1 s, HTTP twice 0.2 s apart)
KEEP_PROBES = ("processes", "rings", "http", "stacks", "nvml")  # what progress reads; the rest is dropped
KEEP_PROC_KEYS = ("pid", "ppid", "pgid", "role", "name", "ranks", "state", "titled", "title", "comm", "cpu_user_s",
                  "cpu_system_s", "io")  # io: an in-process engine's only counter (its output; progress.py)
Collect = Callable[..., Snapshot]
Tick = Callable[[float, float], None]
Given = CollectOptions | Mapping[str, Any]  # the typed options, or their dict form (a test's)


def fresh_context(ctx: Context | None) -> Context | None:
    """A new run's context on the same roots (a Context holds one run's results and deadline)."""
    if ctx is None:
        return None
    return Context(proc_root=ctx.proc_root, dev_shm=ctx.dev_shm, rpc_base=ctx.rpc_base, title_prefix=ctx.title_prefix)


def resample(snap: Snapshot, pids: list[int], collect: Collect, options: Given, ctx: Context | None,
             waited_s: float, budget_s: float = PASS_BUDGET_S) -> None:
    """Dump ``pids`` again and store each dump as the ``resample`` of the first pass's dump."""
    by_pid = {d.get("pid"): d for d in snap.data("stacks").get("dumps", []) if isinstance(d, dict)}
    pids = [p for p in pids if p in by_pid]
    if not pids:
        return
    time.sleep(max(0.0, SETTLE_S - waited_s))
    start = time.monotonic()
    again = collect(probes=["stacks"], options=pass_options(options).merged({"stack_pids": pids}), budget_s=budget_s,
                    ctx=fresh_context(ctx))
    after = round(max(SETTLE_S, waited_s) + (time.monotonic() - start) / 2, 3)
    for d in again.data("stacks").get("dumps", []):
        if d.get("pid") in pids:
            by_pid[d["pid"]]["resample"] = {"after_s": after, "status": d.get("status"), "reason": d.get("reason"),
                                            "threads": d.get("threads", [])}


def confirm_window(snap: Snapshot, roots: list[int], confirm_s: float, still_stalled: Callable[[Snapshot], bool],
                   collect: Collect, options: Given, ctx: Context | None, tick: Tick | None = None,
                   started: float | None = None, only: list[str] | None = None) -> None:
    """Follow-up passes of the deployments rooted at ``roots`` until something moves or the window ends.
    The window counts from ``started`` (triage's start: the quick pass already looked), so a stalled
    node's verdict comes about ``confirm_s`` after triage began; no pass starts that cannot end in it."""
    start = time.monotonic() if started is None else started
    probes = [p for p in PASS_PROBES if only is None or p in only]
    end, stopped = start + confirm_s, "window"
    last_s = MIN_PASS_S
    while True:
        left = end - time.monotonic()
        if left <= last_s and snap.passes:
            # A pass that cannot end in the window would only make the verdict late. (One pass at
            # least: a loaded box can spend the whole window on the quick pass.)
            break
        t0 = time.monotonic()
        nxt = collect(probes=probes, options=pass_options(options).merged({"pids": roots, "confirm_pass": True}),
                      budget_s=min(PASS_BUDGET_S, max(MIN_PASS_S, left)), ctx=fresh_context(ctx))
        snap.passes.append(slim(nxt))
        last_s = max(MIN_PASS_S, time.monotonic() - t0)
        if tick is not None:
            tick(min(confirm_s, time.monotonic() - start), confirm_s)
        if not still_stalled(snap):
            stopped = "moved"
            break
        time.sleep(max(0.0, min(PASS_GAP_S - (time.monotonic() - t0), end - time.monotonic())))
    note(snap, confirm=ConfirmWindow(requested_s=confirm_s, window_s=round(time.monotonic() - start, 2),
                                     passes=len(snap.passes), stopped=stopped))


def pass_options(options: Given) -> CollectOptions:
    """A follow-up pass repeats the cheap looks only: no --rates stretch, no second completion request,
    no second NCCL RAS query, no gate facts."""
    return as_options(options).without("rates_s", "probe_request", "nccl_ras", "preflight")


def slim(snap: Snapshot) -> Snapshot:
    """A follow-up pass keeps what progress reads: a 10 s window of a TP=8 node stays small."""
    snap.probes = {k: v for k, v in snap.probes.items() if k in KEEP_PROBES}
    procs = snap.probes.get("processes")
    if procs is not None:
        procs.data = {"processes": [{k: p.get(k) for k in KEEP_PROC_KEYS}
                                    for p in procs.data.get("processes", []) if isinstance(p, dict)]}
    snap.options = {}
    return snap
