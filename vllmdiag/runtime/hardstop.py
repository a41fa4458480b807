"""The budget as a promise the kernel keeps: collection runs in a forked child that we kill at the deadline.

The runner's watchdog ends probes at the budget, but only while Python can run it: a probe that holds
the GIL (a regex backtracking in C on a 100,000-character argument, issue 15 item 2) or a thread stuck
in the kernel keeps the watchdog from ever firing. So ``collect_bounded`` forks (no re-import: the child
has every module the parent loaded), the child collects in a session of its own and streams each
probe result as one JSON line the moment it is recorded, then the whole snapshot. At budget + grace
the parent kills every process of that session (the child, its py-spy and NVML children) and builds
the snapshot from what arrived: probes that never answered are ``timeout`` "collector killed at the
budget". Normally the watchdog ends first and the child answers in time, with partial results kept.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from vllmdiag import __version__
from vllmdiag.context import Context
from vllmdiag.model import ProbeResult, Snapshot, SnapshotError, strict_json
from vllmdiag.registry import Probe, discover
from vllmdiag.registry import select as select_probes
from vllmdiag.runtime import lastword
from vllmdiag.runtime.killtree import end_processes, kill_session, own_children
from vllmdiag.runtime.record import note

GRACE_S = 0.5  # after the budget: the child serializes and exits; killing sooner would lose good results
REAP_S = 0.5  # how long to wait for the killed child (one in D state may never go)
KILLED = "collector killed at the budget ({:.1f} s): a probe held it past every deadline"


def collect_bounded(ctx: Context, *, probes: list[str] | None = None, enable: set[str] | None = None,
                    budget_s: float, registry: dict[str, Probe] | None = None, grace_s: float = GRACE_S,
                    meanwhile: Callable[[], None] | None = None, limits: dict[int, int] | None = None,
                    on_result: Callable[[str, dict[str, Any]], None] | None = None) -> Snapshot:
    """``meanwhile`` runs in a thread of this (parent) process while the child collects: the parent
    only waits on a pipe then, so what comes next (imports, rules) costs no wall time. It is started
    after the fork (a thread inside an import at fork time would leave the child's import lock held).
    ``limits``: RLIMIT_* -> value set in the child before it collects (never raised above what it
    has): the resident watcher bounds each pass's memory, CPU seconds and fds this way, so a hostile
    answer that makes a probe run away ends that pass, never the watcher (issue 25 item 4).
    ``on_result``: called in this process with each probe's data as it arrives, while the child still
    collects (triage classifies the stacks then, off the path after the window); what it raises is dropped."""
    from vllmdiag.runtime.runner import collect_snapshot

    names: list[str] | None = None
    if probes is not None or registry is not None:  # bad names fail here, before the fork
        registry = registry if registry is not None else discover()
        names = list(select_probes(registry, probes, enable or set()))
    # else the default probes: the child imports them (discover) while this process runs ``meanwhile``
    start = time.monotonic()
    started_at = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds")
    rfd, wfd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(rfd)
        _child(wfd, lambda: collect_snapshot(ctx, probes=probes, enable=enable, budget_s=budget_s, registry=registry),
               ctx, limits)
    os.close(wfd)
    lastword.collector(pid)
    helper = _start(meanwhile)
    killed = False
    try:
        lines, complete = _read_until(rfd, start + budget_s + grace_s, _results_to(on_result))
    except BaseException:
        kill_session(pid)  # Ctrl-C in the parent: nothing we started may outlive us
        raise
    finally:
        os.close(rfd)
    if not complete:
        killed = True
        kill_session(pid)
    _reap(pid)
    lastword.collector(None)
    if helper is not None:
        helper.join(REAP_S)  # before any later fork; imports do not hang, and a daemon thread cannot hold us
    return _assemble(lines, killed, lambda: names or list(select_probes(discover(), probes, enable or set())), ctx,
                     started_at, time.monotonic() - start, budget_s)


def _start(meanwhile: Callable[[], None] | None) -> threading.Thread | None:
    if meanwhile is None:
        return None

    def run() -> None:
        try:
            meanwhile()
        except Exception:  # noqa: BLE001 - a head start only: the real call later raises it properly
            pass

    helper = threading.Thread(target=run, name="meanwhile", daemon=True)
    helper.start()
    return helper


def _child(wfd: int, run: Any, ctx: Context, limits: dict[int, int] | None = None) -> None:
    code = 0
    try:
        os.setsid()  # our session: the parent finds every process we start by its session id
        for which, value in (limits or {}).items():
            _lower_limit(which, value)
        # Before any probe thread starts (the class is per thread, inherited by what it starts): a
        # CLI that boosted itself passes its own state on; a resident watcher's triage boosts here.
        from vllmdiag.runtime import priority

        prio = priority.boost(ctx.options.boost)
        lock = threading.Lock()

        def emit(obj: dict[str, Any]) -> None:
            data = (strict_json.dumps(obj, separators=(",", ":"), default=str) + "\n").encode()
            with lock:
                view = memoryview(data)
                while view:
                    view = view[os.write(wfd, view):]

        # Plain dicts straight to the C encoder (ProbeResult.to_dict's asdict copies every nested value).
        ctx.on_record = lambda name, res: emit({"probe": name, "status": res.status, "duration_s": res.duration_s,
                                                "reason": res.reason, "data": res.data})
        emit({"priority": prio})
        snap = run()
        note(snap, priority=prio)
        # A probe abandoned at its deadline may have left a subprocess (py-spy on a D-state target):
        # nothing we started outlives the collection, and a target its kill left stopped is resumed.
        end_processes(own_children())
        # The results went out as they were recorded (the snapshot holds those very objects): the end
        # is the snapshot's frame only.
        emit({"done": {"node": snap.node, "collected_at": snap.collected_at, "duration_s": snap.duration_s,
                       "options": snap.options, "probes": list(snap.probes)}})
    except BaseException as exc:  # noqa: BLE001 - the parent reports it; a child must never unwind into the CLI
        code = 1
        try:
            os.write(wfd, (json.dumps({"error": f"{type(exc).__name__}: {exc}"}) + "\n").encode())
        except OSError:
            pass
    finally:
        os._exit(code)


def _lower_limit(which: int, value: int) -> None:
    import resource

    soft, hard = resource.getrlimit(which)
    new = value if hard == resource.RLIM_INFINITY else min(value, hard)
    if soft == resource.RLIM_INFINITY or new < soft:
        resource.setrlimit(which, (new, new))


def _read_until(fd: int, deadline: float, on_line: Callable[[dict[str, Any]], None] | None = None
                ) -> tuple[list[dict[str, Any]], bool]:
    """Every whole line the child wrote, decoded as it arrived (the end of the collection only decodes
    its last lines), and whether it closed the pipe (finished) before the deadline. A line that is not
    a JSON object (one cut by the kill) is dropped."""
    out: list[dict[str, Any]] = []
    pending: list[bytes] = []  # a line's pieces until its newline comes (joined once: a long line stays linear)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            return out, False
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return out, True
        if b"\n" not in chunk:
            pending.append(chunk)
            continue
        *whole, rest = (b"".join(pending) + chunk).split(b"\n")
        pending = [rest]
        for line in whole:
            try:
                obj = json.loads(line)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
                if on_line is not None:
                    on_line(obj)


def _results_to(on_result: Callable[[str, dict[str, Any]], None] | None) -> Callable[[dict[str, Any]], None] | None:
    if on_result is None:
        return None

    def relay(obj: dict[str, Any]) -> None:
        if "probe" in obj and isinstance(obj.get("data"), dict):
            try:
                on_result(str(obj["probe"]), obj["data"])
            except Exception:  # noqa: BLE001 - a head start only: the snapshot is built from the lines anyway
                pass

    return relay


def _assemble(lines: list[dict[str, Any]], killed: bool, all_names: Callable[[], list[str]], ctx: Context, started_at: str,
              elapsed: float, budget_s: float) -> Snapshot:
    results: dict[str, ProbeResult] = {}
    error = None
    done: dict[str, Any] | None = None
    prio: Any = None
    for obj in lines:
        try:
            if "probe" in obj:
                results[str(obj["probe"])] = ProbeResult.from_dict(obj, "collector")
            elif "done" in obj and not killed:
                done = obj["done"]
            elif "priority" in obj:
                prio = obj["priority"]
            elif "error" in obj:
                error = str(obj["error"])
        except (ValueError, TypeError, KeyError, AttributeError, SnapshotError):
            continue  # not a line the child writes
    if done is not None and all(n in results for n in done["probes"]):
        return Snapshot(node=str(done["node"]), collected_at=str(done["collected_at"]), vllmdiag_version=__version__,
                        duration_s=float(done["duration_s"]), probes={n: results[n] for n in done["probes"]},
                        options=dict(done["options"]))
    why = KILLED.format(budget_s) if killed else f"collector failed: {error or 'no answer'}"
    names = all_names()  # the probes that should have answered (a broken probe module raises here, as before)
    for name in names:
        results.setdefault(name, ProbeResult("timeout" if killed else "error", round(elapsed, 4), why))
    options = {k: v for k, v in ctx.options.to_dict().items() if isinstance(v, (str, int, float, bool, list, dict))}
    snap = Snapshot(node=ctx.options.node or socket.gethostname(), collected_at=started_at,
                    vllmdiag_version=__version__, duration_s=round(elapsed, 4),
                    probes={n: results[n] for n in names}, options=options)
    note(snap, priority=prio)  # the priority first, as the cut collection always wrote it
    note(snap, budget_s=budget_s)
    return snap


def _reap(pid: int) -> None:
    deadline = time.monotonic() + REAP_S
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return
        if done or time.monotonic() >= deadline:
            return  # one stuck in D state is left to init: we never block on it
        time.sleep(0.0005)  # it closed its pipe: exiting, a matter of a millisecond
