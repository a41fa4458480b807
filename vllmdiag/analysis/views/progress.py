"""Progress per deployment over successive passes of one node: did work move? (pure)

"Healthy" must mean we saw it move. A deployment has **work in flight** when requests run or wait
(/metrics), a ring holds unread slots, or its EngineCore or a worker is inside a step (stacks). It
**moved** when a token or request counter grew, a ring's flags changed, or a compute process's stack
changed its stop point (the innermost frames of pure waiting -- poll, sched_yield, a condition
wait -- are dropped first, so a waiter whose spin leaf flickers is still). CPU time is reported but
never counts as movement: a host thread waiting on a wedged GPU or spinning in ``sched_yield`` burns
a full core while nothing moves (vllm-internals 5.1, 5.3). A deployment with work in flight and
nothing moved over the window is stalled; ``window_s`` says how long we looked.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.views import kv_transfer
from vllmdiag.analysis.views.deployments import Deployment, find_deployments, role_of
from vllmdiag.analysis.views.stack_match import StackClass, call_site, classify_threads, stop_signature, thread_frames
from vllmdiag.model import Snapshot
from vllmdiag.vocab.stack_classes import (
    COLLECTIVE,
    COMPILING,
    ENGINE_BLOCKED_FULL_RING,
    ENGINE_BUSY,
    ENGINE_WAITING_WORKERS,
    ENGINE_YIELD,
    EXECUTING,
    GRAMMAR_BITMASK,
    GRAMMAR_COMPILE,
    KV_TRANSFER,
    NCCL_INIT,
    SYNC_POINT,
    WRITER_BLOCKED_FULL_RING,
)

# A stall held this long is a block: decode steps take 10-100 ms and chunked prefill bounds a
# step to about a second (gpu_progress, gpu_groups).
HELD_S = 3.0
COUNTERS = ("generation_tokens", "prompt_tokens", "steps", "requests_finished")
# Stack classes that mean the process is inside a step (or a startup phase that must finish).
# A grammar compile or bitmask fill is work for a request too (queue_grammar judges it).
STEP_CLASSES = (COLLECTIVE, SYNC_POINT, EXECUTING, COMPILING, ENGINE_WAITING_WORKERS,
                ENGINE_BLOCKED_FULL_RING, WRITER_BLOCKED_FULL_RING, ENGINE_BUSY, NCCL_INIT, GRAMMAR_COMPILE,
                GRAMMAR_BITMASK)
COMPUTE_ROLES = ("engine_core", "worker")
# A P/D decode instance whose requests wait for remote KV keeps stepping with 0 tokens (vLLM 0.33 core.py
# _process_engine_step, kv_connector_no_forward): its stack changes between looks, but polling is no movement.
POLLING = (ENGINE_YIELD, KV_TRANSFER)
Observation = tuple[StackClass, tuple[Any, ...], str | None]  # class, stop signature, call site


@dataclass
class Progress:
    deployment_id: str
    work_in_flight: bool
    moved: bool
    moved_what: list[str] = field(default_factory=list)
    still: list[str] = field(default_factory=list)
    window_s: float = 0.0
    in_flight: list[str] = field(default_factory=list)  # what says work is in flight
    passes: int = 1
    # Probes that could not look (timed out, skipped, failed) at what "in flight" and "moved" read:
    # they never support "idle", "drained" or "no step under way" (issue 24).
    blind: list[str] = field(default_factory=list)
    # Progress probes no pass ran at all (the caller's --probe left them out): no look, so no "idle" either.
    unasked: list[str] = field(default_factory=list)
    # Looked at twice, read alike, and that proves nothing: a drained ring's flags read the same between
    # any two steps (every slot written and read), however many steps ran in between.
    no_evidence: list[str] = field(default_factory=list)
    cpu_s: dict[int, float] = field(default_factory=dict)  # pid -> CPU seconds used over the window
    # pid -> every stack look at it (not serialized): the shape rules read them without classifying again
    observations: dict[int, list[Observation]] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"deployment": self.deployment_id, "work_in_flight": self.work_in_flight, "moved": self.moved,
                "moved_what": self.moved_what, "still": self.still, "window_s": self.window_s,
                "in_flight": self.in_flight, "passes": self.passes, "blind": self.blind,
                "unasked": self.unasked,
                "no_evidence": self.no_evidence,
                "cpu_s": {str(k): v for k, v in sorted(self.cpu_s.items())}}


def is_stalled(p: Progress) -> bool:
    return p.work_in_flight and not p.moved


def stall_seen(p: Progress) -> bool:
    """Stalled, and not only for want of looking: something was seen still (a counter that stayed between
    two answered samples, a ring holding unread slots, a stack held over a resample), or no probe was
    blind (then the suspicion stands and asks for the confirm window). With blind probes and only drained
    rings, nothing supports "nothing moved" (issue 24: the loaded real server read degraded while tokens
    flowed): the verdict is inconclusive, naming them."""
    return is_stalled(p) and (bool(p.still) or not p.blind)


def all_passes(snapshot: Snapshot) -> list[Snapshot]:
    """The quick pass followed by the confirm window's follow-up passes stored inside it."""
    return [snapshot, *snapshot.passes]


def deployment_progress(passes: list[Snapshot], deployments: list[Deployment] | None = None) -> list[Progress]:
    """``passes``: successive snapshots of ONE node, oldest first. Deployments come from the first."""
    if not passes:
        return []
    deps = deployments if deployments is not None else find_deployments(passes[0])
    window = _window(passes)
    return [progress_and_groups(passes, dep, window)[0] for dep in deps]


def progress_and_groups(passes: list[Snapshot], dep: Deployment, window: float | None = None
                        ) -> tuple[Progress, list[tuple[Deployment, Progress]]]:
    """The deployment's progress and its rank groups' (``group_progress``), the first made of the others."""
    at = _window(passes) if window is None else window
    groups = group_progress(passes, dep, at)
    return _whole(dep, groups, at, len(passes)), groups


def group_progress(passes: list[Snapshot], dep: Deployment, window: float | None = None
                   ) -> list[tuple[Deployment, Progress]]:
    """Each rank group of the deployment (views/rank_groups.py) with its own progress: the deployment
    itself, or each independent DP engine with its workers, rings and /metrics series."""
    from vllmdiag.analysis.views.rank_groups import rank_groups

    at = _window(passes) if window is None else window
    return [(g, _one(passes, g, at)) for g in rank_groups(dep)]


def _whole(dep: Deployment, groups: list[tuple[Deployment, Progress]], window: float, passes: int) -> Progress:
    """The deployment's progress from its groups': moved only when no group with work in flight stood
    still, since one group's movement never vouches for another's (issue 33: DP0's tokens called a hung
    DP1 healthy)."""
    if len(groups) == 1:
        return groups[0][1]
    p = Progress(dep.id, False, False, window_s=window, passes=passes)
    for g, gp in groups:
        p.moved_what += [f"{g.group}: {m}" for m in gp.moved_what]
        p.still += [f"{g.group}: {m}" for m in gp.still]
        p.in_flight += [f"{g.group}: {m}" for m in gp.in_flight]
        p.no_evidence += [f"{g.group}: {m}" for m in gp.no_evidence]
        p.blind += [b for b in gp.blind if b not in p.blind]
        p.unasked += [u for u in gp.unasked if u not in p.unasked]
        p.cpu_s.update(gp.cpu_s)
        p.observations.update(gp.observations)
    stalled = [g.group for g, gp in groups if is_stalled(gp)]
    p.work_in_flight = any(gp.work_in_flight for _, gp in groups)
    p.moved = bool(p.moved_what) and not stalled
    if stalled and p.moved_what:
        p.still.append(f"{', '.join(stalled)} stood still while {', '.join(g.group for g, gp in groups if gp.moved)} moved")
    return p


def _one(passes: list[Snapshot], dep: Deployment, window: float) -> Progress:
    p = Progress(dep.id, False, False, window_s=window, passes=len(passes))
    _metrics(passes, dep, p)
    _rings(passes, dep, p)
    _stacks(passes, dep, p)
    _script_output(passes, dep, p)
    _empty_steps_waiting_for_kv(passes, dep, p)
    p.blind = blind_probes(passes, dep)
    p.unasked = unasked_probes(passes, dep)
    p.cpu_s = _cpu(passes, dep)
    p.work_in_flight = bool(p.in_flight)
    p.moved = bool(p.moved_what)
    return p


def _empty_steps_waiting_for_kv(passes: list[Snapshot], dep: Deployment, p: Progress) -> None:
    """A P/D decode instance whose requests all wait for remote KV keeps taking 0-token steps (vLLM 0.33
    core.py, kv_connector_no_forward): the rpc ring's flags and the engine's stack change on every step,
    yet no request advances. That is polling, not movement (only a counter would be), so the quick pass
    opens the confirm window instead of calling it healthy (seen under a CPU hog: the ring moved in the
    0.1 s quick pass, the window never opened and the KV wait went unnamed)."""
    if not kv_transfer.is_consumer(dep) or not p.moved_what:
        return
    samples = [m for s in passes for m in metric_samples(s, dep)]
    # The picture of one moment (any gap): the window's length is the KV-wait finding's to judge.
    if len(samples) < 2 or kv_transfer.waiting_for_kv(samples, kv_transfer.MIN_GAP_S, dep.kv_transfer.get("role")) is None:
        return
    counters = tuple(k.replace("_", " ") for k in COUNTERS)
    polled = [m for m in p.moved_what if not m.startswith(counters)]
    if polled:
        p.moved_what = [m for m in p.moved_what if m.startswith(counters)]
        p.still.append("empty steps while every request waits for remote KV (" + "; ".join(polled[:4]) + ")")


# ---- what could not be seen --------------------------------------------------------------------
# What progress reads, and the statuses that mean it saw nothing: `http` skips on its own finding
# (no API server process), which is a fact, not blindness; rings skip when shm did not list.
PROGRESS_PROBES = {"stacks": ("timeout", "error", "skipped"), "rings": ("timeout", "error", "skipped"),
                   "http": ("timeout", "error")}


def unasked_probes(passes: list[Snapshot], dep: Deployment) -> list[str]:
    """Progress probes that had something of this deployment to look at and that no pass ran (the
    caller's --probe left them out): stacks always; rings where there are workers (the executor's rings
    are shared with them); http where there is an API server (an offline LLM() has none)."""
    roles = {role_of(q) for q in dep.processes}
    relevant = ["stacks"] + (["rings"] if "worker" in roles else []) + (["http"] if "api_server" in roles else [])
    return [name for name in relevant if not any(name in s.probes for s in passes)]


def blind_probes(passes: list[Snapshot], dep: Deployment) -> list[str]:
    """"probe status (reason)" for each progress probe that saw nothing in every pass that ran it; for
    stacks also when no compute process of this deployment was dumped (each dump timed out)."""
    out = []
    for name, bad in PROGRESS_PROBES.items():
        ran = [s.probes[name] for s in passes if name in s.probes]
        if ran and all(r.status in bad for r in ran):
            first, cause = ran[0], passes[0].probes.get("shm") if name == "rings" else None
            because = f"; shm {cause.status}: {cause.reason}" if cause is not None and cause.status not in ("ok", "partial") \
                else ""
            out.append(f"{name} {first.status}" + (f" ({first.reason}{because})" if first.reason else ""))
    answered = [m.get("status") for s in passes for m in _dep_metrics(s, dep)]
    if not any(o.startswith("http ") for o in out) and len(answered) >= 2 and answered.count(200) < 2:
        out.append(f"http /metrics sampled {len(answered)} time(s), {answered.count(200)} answered "
                   "(a counter needs two answers to show movement)")
    if not any(o.startswith("stacks ") for o in out):
        compute = {q["pid"] for q in dep.processes if role_of(q) in COMPUTE_ROLES}
        dumps = [d for s in passes for d in s.data("stacks").get("dumps", []) or []
                 if isinstance(d, dict) and d.get("pid") in compute]
        if dumps and not any(d.get("status") == "ok" for d in dumps):
            reason = next((str(d.get("reason")) for d in dumps if d.get("reason")), "")
            out.append(f"stacks of the EngineCore and workers not read ({dumps[0].get('status')}"
                       + (f": {reason}" if reason else "") + ")")
    return out


# ---- window ------------------------------------------------------------------------------------
def _window(passes: list[Snapshot]) -> float:
    """Seconds from the first pass's start (``collected_at`` is a pass's end, minus its duration: its
    rings, /metrics and stacks are read from the start on) to the last pass's end; one pass alone
    counts only what it sampled twice (rings, /metrics, a stack resample)."""
    inner = max((_inner_window(s) for s in passes), default=0.0)
    first, last = _at(passes[0]), _at(passes[-1])
    if len(passes) < 2 or first is None or last is None:
        return round(inner, 2)
    return round(max(inner, last - first + max(0.0, passes[0].duration_s)), 2)


def watched_s(passes: list[Snapshot]) -> float:
    """How long the passes looked, as ``Progress.window_s`` counts it (the report's timeline spans this)."""
    return _window(passes) if passes else 0.0


def _inner_window(snap: Snapshot) -> float:
    rings = [float(r.get("window_s") or 0.0) for r in snap.data("rings").get("rings", []) or [] if isinstance(r, dict)]
    gap = float(snap.data("http").get("sample_gap_s") or 0.0)
    dumps = snap.data("stacks").get("dumps", []) or []
    again = max((float((d.get("resample") or {}).get("after_s") or 0.0) for d in dumps if isinstance(d, dict)),
                default=0.0)
    return max([gap, again, *rings])


def _at(snap: Snapshot) -> float | None:
    try:
        return _dt.datetime.fromisoformat(snap.collected_at).timestamp()
    except (TypeError, ValueError):
        return None


# ---- /metrics ----------------------------------------------------------------------------------
def metric_samples(snap: Snapshot, dep: Deployment) -> list[dict[str, Any]]:
    return [m for m in _dep_metrics(snap, dep) if m.get("status") == 200]


def _dep_metrics(snap: Snapshot, dep: Deployment) -> list[dict[str, Any]]:
    """Every /metrics sample of the deployment's API server, answered or not (a timeout has no status)."""
    out = []
    for server in snap.data("http").get("servers", []) or []:
        if isinstance(server, dict) and set(server.get("pids") or []) & (dep.pids | dep.api_pids):
            out += [m for m in server.get("metrics") or [] if isinstance(m, dict)]
    if dep.engine_label is None:
        return out
    # A DP rank group reads its own engine's series only; a sample without them says nothing of it. One
    # engine label alone for several engines is not trusted (a real DP=2 /metrics once read engine="0" only
    # while its sums were both ranks'): then no group reads /metrics, rather than one vouching for another.
    return [{"status": m.get("status"), **mine} for m in out
            if isinstance(by := m.get("by_engine"), dict) and len(by) > 1
            and isinstance(mine := by.get(dep.engine_label), dict)]


def _metrics(passes: list[Snapshot], dep: Deployment, p: Progress) -> None:
    samples = [m for s in passes for m in metric_samples(s, dep)]
    if not samples:
        return
    first, last = samples[0], samples[-1]
    for key in COUNTERS:
        a, b = first.get(key), last.get(key)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            if b != a:
                p.moved_what.append(f"{key.replace('_', ' ')} {a:.0f} -> {b:.0f}")
            elif len(samples) > 1:
                p.still.append(f"{key.replace('_', ' ')} stayed at {b:.0f}")
    running, waiting = last.get("running") or 0, last.get("waiting") or 0
    if running or waiting:
        p.in_flight.append(f"{running:.0f} request(s) running, {waiting:.0f} waiting")


# ---- rings -------------------------------------------------------------------------------------
def _rings(passes: list[Snapshot], dep: Deployment, p: Progress) -> None:
    seen: dict[tuple[Any, Any], str | None] = {}
    moved: set[str] = set()
    unread: dict[str, int] = {}
    looks: dict[str, int] = {}
    for snap in passes:
        for r in snap.data("rings").get("rings", []) or []:
            if not isinstance(r, dict) or not set(r.get("mapped_by") or []) & dep.pids:
                continue
            name = str(r.get("name"))
            key = (name, r.get("inode"))
            flags = _last_flags(r)
            if r.get("moved") or (key in seen and flags is not None and seen[key] not in (None, flags)):
                moved.add(name)
            seen[key] = flags if flags is not None else seen.get(key)
            looks[name] = looks.get(name, 0) + int(r.get("sample_count") or 1)
            unread[name] = max((int(u) for u in r.get("unread_slots") or [] if isinstance(u, int)), default=0)
    p.moved_what += [f"ring {n} flags changed" for n in sorted(moved)]
    alike = [n for n, k in sorted(looks.items()) if k > 1 and n not in moved]
    p.still += [f"ring {n} still" for n in alike if unread.get(n)]
    p.no_evidence += [f"ring {n} drained (its flags read alike between any two steps)" for n in alike if not unread.get(n)]
    p.in_flight += [f"ring {n} holds {u} unread slot(s)" for n, u in sorted(unread.items()) if u and n not in moved]


def _last_flags(ring: dict[str, Any]) -> str | None:
    flags = [s.get("flags") for s in ring.get("samples") or [] if isinstance(s, dict) and isinstance(s.get("flags"), str)]
    return flags[-1] if flags else None


# ---- stacks ------------------------------------------------------------------------------------
def stack_observations(passes: list[Snapshot], dep: Deployment) -> dict[int, list[Observation]]:
    """pid -> (class, stop signature, call site) per look, in time order (dump, its resample, next pass...)."""
    roles = {p["pid"]: role_of(p) for p in dep.processes}
    out: dict[int, list[Observation]] = {}
    for snap in passes:
        for d in snap.data("stacks").get("dumps", []) or []:
            if not isinstance(d, dict) or roles.get(d.get("pid")) not in COMPUTE_ROLES:
                continue
            for threads in (d.get("threads"), (d.get("resample") or {}).get("threads")):
                if threads:
                    sc = classify_threads(threads, roles[d["pid"]])
                    site = call_site(thread_frames(threads, sc))
                    out.setdefault(int(d["pid"]), []).append((sc, stop_signature(threads, sc), site))
    return out


def look_times(passes: list[Snapshot], dep: Deployment) -> dict[int, list[float]]:
    """pid -> when each of ``stack_observations``' looks was taken (same loops, same order), in s since the
    first pass began: a dump at its pass's start (the probe's own start is not recorded), a resample after_s
    later. For the report's timeline only; no verdict reads these times."""
    roles = {p["pid"]: role_of(p) for p in dep.processes}
    out: dict[int, list[float]] = {}
    for snap, start in zip(passes, pass_starts(passes), strict=True):
        for d in snap.data("stacks").get("dumps", []) or []:
            if not isinstance(d, dict) or roles.get(d.get("pid")) not in COMPUTE_ROLES:
                continue
            again = d.get("resample") or {}
            for threads, at in ((d.get("threads"), 0.0), (again.get("threads"), _seconds(again.get("after_s")))):
                if threads:
                    out.setdefault(int(d["pid"]), []).append(round(start + at, 3))
    return out


def pass_starts(passes: list[Snapshot]) -> list[float]:
    """When each pass began, in s since the first began (``collected_at`` is a pass's end, less its duration);
    0.0 for a pass whose time cannot be read."""
    def began(snap: Snapshot) -> float | None:
        at = _at(snap)
        return None if at is None else at - max(0.0, _seconds(snap.duration_s))
    first = began(passes[0]) if passes else None
    return [0.0 if first is None or (b := began(s)) is None else round(max(0.0, b - first), 3) for s in passes]


def _seconds(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else 0.0


def _stacks(passes: list[Snapshot], dep: Deployment, p: Progress) -> None:
    names = {q["pid"]: _short(q) for q in dep.processes}
    moved, still, busy = [], [], []
    p.observations = stack_observations(passes, dep)
    for pid, obs in sorted(p.observations.items()):
        last = obs[-1][0]
        if last.name in STEP_CLASSES:
            busy.append(f"{names.get(pid, pid)} {last.label}")
        if len(obs) < 2:
            continue
        if all(sc.name in POLLING for sc, _, _ in obs):
            still.append(f"{names.get(pid, pid)} only polled the KV connector ({last.label})")
        elif not all(same_place(obs[0][1], sig) for _, sig, _ in obs[1:]):
            moved.append(str(names.get(pid, pid)))
        elif last.name in STEP_CLASSES:
            still.append(f"{names.get(pid, pid)} held {last.label} at {last.where}")
    if moved:
        p.moved_what.append("stacks changed: " + ", ".join(moved[:8]))
    p.still += still
    if busy:
        p.in_flight.append("in a step: " + ", ".join(busy[:8]) + (" ..." if len(busy) > 8 else ""))


def same_place(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    """Two stop signatures (class, frames innermost first) of one process stand in the same place when
    they differ only inside the innermost function the shorter one reached: a polling loop (``while
    not ready: check(); time.sleep(0.05)``, a real hang's shape too) is at another line of that
    function, or one call deeper, on every look, yet never leaves it. Seen on a real vLLM worker held
    in such a loop under load: each look caught another line and "stacks changed" called it moving."""
    if a == b:
        return True
    if a[0] != b[0] or not a[1] or not b[1]:
        return False
    short, long = (a[1], b[1]) if len(a[1]) <= len(b[1]) else (b[1], a[1])
    k = len(short)
    if tuple(short[1:]) != tuple(long[len(long) - k + 1:]):  # the callers, aligned from the outermost
        return False
    inner, there = short[0], long[len(long) - k]
    return bool(inner[0] == there[0] and inner[1] == there[1])  # same function, any line or callee


def _short(proc: dict[str, Any]) -> str:
    name = str(proc.get("name") or "")
    return name.replace("Worker_", "") if name else f"{role_of(proc)} {proc['pid']}"


# ---- an in-process engine's output ---------------------------------------------------------------
def _script_output(passes: list[Snapshot], dep: Deployment, p: Progress) -> None:
    """LLM() in-process at TP=1 has no /metrics and no rings, and a busy engine waits at the same sync
    point every step, so its stack alone cannot show movement. What it writes can: LLM.generate's
    progress bar (tqdm, on by default) goes to stderr as requests finish (/proc/<pid>/io wchar)."""
    pids = {q["pid"] for q in dep.processes if q.get("inprocess_engine")}
    if not pids or len(passes) < 2:
        return

    def written(snap: Snapshot) -> dict[int, int]:
        return {int(q["pid"]): int(q["io"]["wchar"]) for q in snap.data("processes").get("processes", []) or []
                if isinstance(q, dict) and q.get("pid") in pids and isinstance(q.get("io"), dict)
                and isinstance(q["io"].get("wchar"), int)}
    a, b = written(passes[0]), written(passes[-1])
    for pid in sorted(set(a) & set(b)):
        if b[pid] > a[pid]:
            p.moved_what.append(f"the script (pid {pid}) wrote {b[pid] - a[pid]} bytes (its progress output)")
        else:
            p.still.append(f"the script (pid {pid}) wrote nothing")


# ---- CPU ---------------------------------------------------------------------------------------
def _cpu(passes: list[Snapshot], dep: Deployment) -> dict[int, float]:
    if len(passes) < 2:
        return {}
    def times(snap: Snapshot) -> dict[int, float]:
        return {int(q["pid"]): float(q.get("cpu_user_s") or 0.0) + float(q.get("cpu_system_s") or 0.0)
                for q in snap.data("processes").get("processes", []) or []
                if isinstance(q, dict) and q.get("pid") in dep.pids and role_of(q) in COMPUTE_ROLES}
    a, b = times(passes[0]), times(passes[-1])
    return {pid: round(b[pid] - a[pid], 2) for pid in a if pid in b}
