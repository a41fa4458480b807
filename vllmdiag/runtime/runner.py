"""Runs probes in parallel under per-probe deadlines and a total budget; records every outcome.

Each probe runs in a daemon thread. A probe stuck in the kernel (a read of /proc/<pid>/cmdline of
a D-state process can block) cannot be interrupted from Python, so at its deadline we record
``timeout`` and abandon the thread; subprocesses started through ``ctx.run`` are killed with their
process group. One probe failing never sinks the run.
"""

from __future__ import annotations

import datetime as _dt
import os
import socket
import threading
import time
import traceback
from typing import Any

from vllmdiag import __version__
from vllmdiag.context import Context
from vllmdiag.model import ProbeResult, Snapshot
from vllmdiag.probe import Partial, Skip
from vllmdiag.redact import redact_text
from vllmdiag.registry import Probe, discover, select
from vllmdiag.runtime.record import note

DEFAULT_BUDGET_S = 8.0
DEFER_MAX_S = 0.3  # a deferred probe waits at most this long for the window to open (x ctx.stretch)


def collect_snapshot(
    ctx: Context | None = None,
    *,
    probes: list[str] | None = None,
    enable: set[str] | None = None,
    budget_s: float = DEFAULT_BUDGET_S,
    node: str | None = None,
    registry: dict[str, Probe] | None = None,
) -> Snapshot:
    ctx = ctx or Context()
    start = time.monotonic()
    ctx.deadline = start + budget_s
    # Per-probe deadlines are sized for the default budget; a larger --budget (a loaded node) widens
    # them in proportion, or --budget 30 would still end the stacks at 6 s (issue 24).
    ctx.stretch = max(1.0, (budget_s - float(ctx.options.rates_s or 0.0)) / DEFAULT_BUDGET_S)
    chosen = select(registry if registry is not None else discover(), probes, enable or set())
    results = _run_all(ctx, chosen)
    snap = Snapshot(
        node=node or ctx.options.node or socket.gethostname(),
        collected_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds"),
        vllmdiag_version=__version__,
        duration_s=round(time.monotonic() - start, 4),
        probes={name: results[name] for name in chosen},
        options={k: v for k, v in ctx.options.to_dict().items() if _jsonable(v)},
    )
    note(snap, budget_s=budget_s)  # so a report can say what the collection was allowed (incident header)
    return snap


def _run_all(ctx: Context, chosen: dict[str, Probe]) -> dict[str, ProbeResult]:
    done: dict[str, threading.Event] = {name: threading.Event() for name in chosen}
    started: dict[str, float] = {}
    lock = threading.Lock()
    non_samplers = [n for n, p in chosen.items() if not p.spec.sampler]
    # --rates: samplers keep observing at least this long, so rates cover a longer window.
    rates_s = float(ctx.options.rates_s or 0.0)
    rates_until = time.monotonic() + rates_s

    def worker(name: str, probe: Probe) -> None:
        # Wait for requirements (bounded by this probe's own deadline share of the budget).
        for dep in probe.spec.requires:
            done[dep].wait(ctx.remaining())
        if probe.spec.deferred:
            ctx.wait_window(min(DEFER_MAX_S * ctx.stretch, ctx.remaining()))
        with lock:
            started[name] = time.monotonic()
        try:
            result = _run_one(ctx, probe)
        finally:
            if probe.spec.opens_window:  # skipped, failed or done: nothing is left to wait for
                ctx.open_window()
        with lock:
            if ctx.result(name) is None:  # the watchdog may have recorded a timeout already
                ctx.record(name, result)
        done[name].set()
        # The samplers' last samples wait for this: said the moment the last probe ends, not at the
        # watchdog's next tick.
        if all(done[n].is_set() for n in non_samplers) and time.monotonic() >= rates_until:
            ctx.mark_others_done()

    if not any(p.spec.opens_window for p in chosen.values()):
        ctx.open_window()
    threads = []
    for name, probe in chosen.items():
        t = threading.Thread(target=worker, args=(name, probe), name=f"probe-{name}", daemon=True)
        t.start()
        threads.append(t)

    # Watchdog loop: enforce per-probe deadlines and the total budget.
    while True:
        now = time.monotonic()
        with lock:
            _time_out(ctx, chosen, done, started, rates_s, now)
        if all(done[n].is_set() for n in non_samplers) and now >= rates_until:
            ctx.mark_others_done()
        if all(e.is_set() for e in done.values()):
            break
        time.sleep(0.005)
    if time.monotonic() >= ctx.deadline:
        ctx.cancel()
    return {name: ctx.result(name) or ProbeResult("error", 0.0, "no result") for name in chosen}


def _time_out(ctx: Context, chosen: dict[str, Probe], done: dict[str, threading.Event], started: dict[str, float],
              rates_s: float, now: float) -> None:
    """One watchdog tick (under the runner's lock): a timeout for each probe past its own limit or the
    total budget, and for each one never started when the budget is spent."""
    for name, probe in chosen.items():
        if done[name].is_set() or name not in started:
            continue
        limit = started[name] + probe.spec.timeout_s * ctx.stretch + (rates_s if probe.spec.sampler else 0.0)
        if now >= limit or now >= ctx.deadline:
            allowed = min(limit - started[name], ctx.deadline - started[name])
            ctx.record(name, ProbeResult("timeout", round(now - started[name], 4),
                                         f"no answer within {allowed:.1f} s"))
            done[name].set()
    if now >= ctx.deadline:
        for name in chosen:
            if not done[name].is_set():  # never started: its requirement hung
                ctx.record(name, ProbeResult("timeout", 0.0, "total budget spent before it could start"))
                done[name].set()


def _run_one(ctx: Context, probe: Probe) -> ProbeResult:
    res = _call(ctx, probe)
    if res.reason:  # reasons quote stderr and paths: the one place every probe's words pass through
        res.reason = redact_text(res.reason, 1024)
    return res


def _call(ctx: Context, probe: Probe) -> ProbeResult:
    start = time.monotonic()
    try:
        out = probe.collect(ctx)
    except Skip as exc:
        return ProbeResult("skipped", _since(start), exc.reason)
    except PermissionError as exc:
        return ProbeResult("error", _since(start), f"permission denied: {exc.filename or exc}; run as root")
    except Exception as exc:  # a probe bug must not sink the run; keep where it came from
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {os.path.basename(tb[-1].filename)}:{tb[-1].lineno}" if tb else ""
        return ProbeResult("error", _since(start), f"{type(exc).__name__}: {exc}{where}")
    if isinstance(out, Partial):
        return ProbeResult("partial", _since(start), out.reason, out.data)
    if not isinstance(out, dict):
        return ProbeResult("error", _since(start), f"probe returned {type(out).__name__}, not a dict")
    return ProbeResult("ok", _since(start), None, out)


def _since(start: float) -> float:
    return round(time.monotonic() - start, 4)


def _jsonable(value: Any) -> bool:
    return isinstance(value, (str, int, float, bool, type(None), list, dict))
