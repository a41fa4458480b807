"""Group a snapshot's processes into deployments: one API server / EngineCore tree each (pure).

Several deployments per node are normal (8 x TP=1). Workers orphaned by a dead EngineCore are
reparented to PID 1 or a subreaper, so the tree no longer links them to their API server; the
process group does (fork keeps the pgid), so orphans rejoin the deployment that shares it.
Other shapes (offline `LLM()`, orphaned engines, Ray workers under a raylet): see shapes.py.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.views import deployment_shapes as shapes
from vllmdiag.analysis.views import kv_transfer
from vllmdiag.model import Snapshot

ROOT_ROLES = ("api_server", "llm_client", "engine_core", "dp_coordinator")
ROLE_ORDER = {"api_server": 0, "llm_client": 0, "api_server_child": 1, "dp_coordinator": 2, "engine_core": 3,
              "worker": 4, "worker_starting": 5, "resource_tracker": 8, "raylet": 9}
_SIZE_FLAGS = {"tp": ("--tensor-parallel-size", "-tp"), "pp": ("--pipeline-parallel-size", "-pp"),
               "dp": ("--data-parallel-size", "-dp"), "nnodes": ("--nnodes",), "node_rank": ("--node-rank",)}


@dataclass
class Deployment:
    id: str
    node: str
    root_pid: int
    processes: list[dict[str, Any]] = field(default_factory=list)
    # Parallel sizes from the API server's command line, when it states them (tp, pp, dp, nnodes,
    # node_rank).
    configured: dict[str, int] = field(default_factory=dict)
    headless: bool = False  # `vllm serve --headless`: a node of a multi-node group without a frontend
    # serve | offline | offline_inprocess | orphaned_engine | ray_node (Ray workers, no engine here)
    kind: str = "serve"
    executor: str = "mp"  # mp | ray
    # How Ray workers were tied to this engine, and how their ranks were found (evidence).
    ray: dict[str, Any] = field(default_factory=dict)
    adopter: dict[str, Any] | None = None  # the orphaned engine's new parent (init, subreaper, shell)
    # TP=1 in-process engine (no vLLM title): what says the script runs vLLM (kernels mapped, GPU, env).
    inprocess: dict[str, Any] = field(default_factory=dict)
    # Disaggregated P/D: the KV connector it declares (kv_transfer.describe), {} when none.
    kv_transfer: dict[str, Any] = field(default_factory=dict)
    # A rank group of a deployment (views/rank_groups.py): "DP1", the /metrics engine label it owns, and the
    # API servers whose /metrics carry it. "" / None / empty for a whole deployment.
    group: str = ""
    engine_label: str | None = None
    api_pids: set[int] = field(default_factory=set)

    def by_pid(self, pid: int) -> dict[str, Any] | None:
        return next((p for p in self.processes if p["pid"] == pid), None)

    def with_role(self, *roles: str) -> list[dict[str, Any]]:
        return [p for p in self.processes if role_of(p) in roles]

    @property
    def workers(self) -> list[dict[str, Any]]:
        return self.with_role("worker")

    @property
    def engines(self) -> list[dict[str, Any]]:
        return self.with_role("engine_core")

    @property
    def pids(self) -> set[int]:
        return {p["pid"] for p in self.processes}


def role_of(proc: dict[str, Any]) -> str:
    """The role, inferring what titles cannot tell: zombies lose their cmdline (comm keeps 15 chars)."""
    role = proc.get("role")
    if role:
        return str(role)
    comm = str(proc.get("comm") or "")
    if "::Worker" in comm:
        return "worker"
    if "::EngineCor" in comm:
        return "engine_core"
    return "other"


def rank_of(proc: dict[str, Any]) -> int | None:
    """The TP rank when the title has one (the rank people say: "TP2"); else the PP/DP rank."""
    ranks = proc.get("ranks") or {}
    for key in ("tp", "pp", "dp"):
        if key in ranks:
            return int(ranks[key])
    return None


MAX_TITLE = 200  # bounded (a cmdline is untrusted), but long enough for the model name and its flags


def display_title(proc: dict[str, Any]) -> str:
    if proc.get("titled"):
        return str(proc.get("title", "")).split(" ")[0]
    if role_of(proc) == "api_server" or proc.get("inprocess_engine"):
        return short_command(proc.get("cmdline") or [])[:MAX_TITLE]
    return str(proc.get("title") or proc.get("comm") or "")[:MAX_TITLE]


def short_command(argv: list[Any]) -> str:
    """`vllm serve facebook/opt-125m --tensor-parallel-size 8`: what a person typed, not the interpreter's
    path. The model name must never be cut (an 80-column cut used to leave `facebook/opt-1`)."""
    words = [str(a) for a in argv]
    if len(words) > 1 and words[0].rsplit("/", 1)[-1].startswith("python"):
        words = words[1:]
        if words[:1] == ["-m"]:
            words = words[1:]
    if words:
        words[0] = words[0].rsplit("/", 1)[-1]
    return " ".join(words)


def find_deployments(snapshot: Snapshot) -> list[Deployment]:
    # Copies: analysis is pure and never edits the snapshot it was given.
    data = snapshot.data("processes")
    procs = [_checked(p) for p in list(data.get("processes", [])) + list(data.get("parents") or [])]
    by_pid = {p["pid"]: p for p in procs}
    _mark_starting_workers(procs, by_pid)
    ok = {n: snapshot.data(n) if snapshot.status(n) in ("ok", "partial") else None for n in ("sockets", "shm")}
    _mark_parents(procs, shapes.client_evidence(ok["sockets"], ok["shm"]))
    nvml_pids = set(shapes.gpu_index_by_pid(snapshot.data("nvml"), procs))
    for p in procs:  # untitled Pythons that map vLLM's kernels: an in-process engine only with evidence
        if p.get("selected_as") == "vllm_mapped" and not p.get("role") and shapes.runs_engine(p, nvml_pids):
            p["role"] = "llm_client"
    roots: dict[int, Deployment] = {}
    owner: dict[int, int] = {}
    for p in sorted(procs, key=lambda p: p["pid"]):
        root = _root_of(p, by_pid)
        if root is not None:
            owner[p["pid"]] = root
    _split_engines(owner, by_pid)
    ray_ties = _tie_ray_workers(snapshot, procs, by_pid, owner)
    pgid_roots: dict[int, set[int]] = {}
    for r in set(owner.values()):
        if by_pid[r].get("pgid"):
            pgid_roots.setdefault(by_pid[r]["pgid"], set()).add(r)
    # An orphan rejoins the one deployment of its process group; several there (a script's engines): it stands alone.
    by_pgid = {g: next(iter(rs)) for g, rs in pgid_roots.items() if len(rs) == 1}
    for p in procs:
        if p["pid"] in owner or role_of(p) not in ("worker", "worker_starting") or is_ray_worker(p, by_pid):
            continue
        owner[p["pid"]] = by_pgid.get(p.get("pgid") or 0, p["pid"])  # orphan: rejoin by pgid or stand alone
    for p in procs:
        if p["pid"] not in owner and role_of(p) == "resource_tracker" and p["ppid"] in owner:
            owner[p["pid"]] = owner[p["ppid"]]
    for pid, root in owner.items():
        if root not in roots:
            roots[root] = Deployment(id=f"{snapshot.node}:{root}", node=snapshot.node, root_pid=root,
                                     configured=_configured(by_pid[root]),
                                     headless="--headless" in by_pid[root].get("cmdline", []))
        roots[root].processes.append(by_pid[pid])
    for root, dep in list(roots.items()):
        if role_of(by_pid[root]) == "llm_client" and by_pid[root].get("selected_as") != "vllm_mapped" and all(
                role_of(p) in ("llm_client", "resource_tracker") for p in dep.processes):
            del roots[root]  # a Python that started no vLLM process of its own group: not a deployment
    for dep in roots.values():
        _shape(snapshot, dep, by_pid, ray_ties)
        _lone_worker_rank(dep)
        _dense_dp_engine(dep)
        dep.processes.sort(key=lambda p: (ROLE_ORDER.get(role_of(p), 7), _rank_key(p), p["pid"]))
    return sorted(roots.values(), key=lambda d: d.root_pid)


def _split_engines(owner: dict[int, int], by_pid: dict[int, dict[str, Any]]) -> None:
    """A user's script that starts two engines (two ``LLM()``, two ``vllm serve``) runs two deployments,
    each an EngineCore (or API server) with its own workers and rings: each becomes its own root. DP
    engines (``EngineCore_DPn``, distinct DP ranks) are one deployment and stay together."""
    for root in set(owner.values()):
        if role_of(by_pid[root]) != "llm_client":
            continue
        heads = [p for pid, r in owner.items() if r == root and pid != root
                 if role_of(p := by_pid[pid]) in ("api_server", "engine_core") and _nearest_head(p, by_pid, root) == root]
        dp = [(h.get("ranks") or {}).get("dp") for h in heads]
        if len(heads) < 2 or (all(role_of(h) == "engine_core" for h in heads) and None not in dp
                              and len(set(dp)) == len(dp)):
            continue
        head_pids = {h["pid"] for h in heads}
        for pid, r in list(owner.items()):
            if r == root and pid != root:
                top = _nearest_head(by_pid[pid], by_pid, root, head_pids)
                if top is not None and top in head_pids:
                    owner[pid] = top


def _nearest_head(proc: dict[str, Any], by_pid: dict[int, dict[str, Any]], root: int,
                  heads: set[int] | None = None) -> int | None:
    """The first ancestor (self excluded; self too when ``heads`` is given) that is one of ``heads`` (or
    has an API server / EngineCore role), or ``root``."""
    cur = proc if heads is not None else by_pid.get(proc["ppid"])
    seen: set[int] = set()
    while cur is not None and cur["pid"] not in seen:
        seen.add(cur["pid"])
        if cur["pid"] == root or (cur["pid"] in heads if heads is not None else role_of(cur) in ("api_server", "engine_core")):
            return int(cur["pid"])
        cur = by_pid.get(cur["ppid"])
    return None


def is_ray_worker(proc: dict[str, Any], by_pid: dict[int, dict[str, Any]]) -> bool:
    """A Ray actor running a vLLM worker: Ray's title, or a vLLM title under a raylet (mid-init)."""
    if role_of(proc) not in ("worker", "worker_starting"):
        return False
    return proc.get("executor") == "ray" or role_of(by_pid.get(proc["ppid"]) or {}) == "raylet"


def _mark_parents(procs: list[dict[str, Any]], evidence: set[int] | None) -> None:
    """Parents of engines/workers that the probe described (``selected_as: parent``): a user's
    Python running `LLM()` becomes the deployment's root; init, subreapers and shells do not."""
    for p in procs:
        if p.get("selected_as") == "parent":
            p["role"] = shapes.parent_kind(p, evidence)


def _tie_ray_workers(snap: Snapshot, procs: list[dict[str, Any]], by_pid: dict[int, dict[str, Any]],
                     owner: dict[int, int]) -> dict[int, dict[str, Any]]:
    """Give Ray workers outside any vLLM tree to the engine they serve; the rest stay with their
    raylet (a Ray worker node). Returns root pid -> how its Ray workers were tied."""
    loose = [p for p in procs if p["pid"] not in owner and is_ray_worker(p, by_pid)]
    ties: dict[int, dict[str, Any]] = {}
    if not loose:
        return ties
    shared = shapes.shm_ties(snap.data("shm").get("segments") or [])
    engine_root = {p["pid"]: owner[p["pid"]] for p in procs if role_of(p) == "engine_core" and p["pid"] in owner}
    ray_roots = {r for e, r in engine_root.items() if _ray_backed(snap, by_pid, e, r, owner)}
    for w in loose:
        via = sorted({engine_root[e] for e in shared.get(w["pid"], set()) if e in engine_root})
        how = "maps the engine's rpc ring (shared memory)"
        if len(via) != 1 and len(ray_roots) == 1:
            via, how = sorted(ray_roots), "the only Ray-backed vLLM engine on this node"
        if len(via) == 1:
            owner[w["pid"]] = via[0]
            ties.setdefault(via[0], {"workers": [], "ties": []})
            ties[via[0]]["workers"].append(w["pid"])
            if how not in ties[via[0]]["ties"]:
                ties[via[0]]["ties"].append(how)
        elif w["ppid"] in by_pid and role_of(by_pid[w["ppid"]]) == "raylet":
            owner[w["pid"]] = owner[w["ppid"]] = w["ppid"]
            ties.setdefault(w["ppid"], {"workers": [], "ties": ["no vLLM engine on this node ties to them"]})
            ties[w["ppid"]]["workers"].append(w["pid"])
    return ties


def _ray_backed(snap: Snapshot, by_pid: dict[int, dict[str, Any]], engine: int, root: int,
                owner: dict[int, int]) -> bool:
    """An engine that drives Ray workers: the API server says so, or the engine's stack is in Ray."""
    if shapes.ray_backend_flag(by_pid.get(root)):
        return True
    dumps = {d.get("pid"): d for d in snap.data("stacks").get("dumps") or [] if isinstance(d, dict)}
    return shapes.stack_mentions_ray(dumps.get(engine))


def _shape(snap: Snapshot, dep: Deployment, by_pid: dict[int, dict[str, Any]],
           ray_ties: dict[int, dict[str, Any]]) -> None:
    root = by_pid[dep.root_pid]
    dep.kv_transfer = kv_transfer.describe(snap, dep)
    role = role_of(root)
    if role == "llm_client":
        dep.kind = "offline_inprocess" if shapes.inprocess_engine(root) or not dep.engines else "offline"
        if root.get("selected_as") == "vllm_mapped" and not dep.engines and not dep.workers:
            # TP=1 in-process (InprocClient + UniProcExecutor): the script is the EngineCore and runs
            # the model itself, so its stacks are read and compared like an EngineCore's.
            dep.kind = "offline_inprocess"
            root["role"], root["inprocess_engine"] = "engine_core", True
            dep.inprocess = shapes.inprocess_evidence(root, set(shapes.gpu_index_by_pid(snap.data("nvml"), [root])))
    elif role == "raylet":
        dep.kind = "ray_node"
    elif role == "engine_core":
        parent = by_pid.get(root["ppid"])
        if parent is not None and role_of(parent) == "llm_client":
            dep.kind = "offline"  # one of the engines of a user's script (_split_engines)
        # Only with the parent described by the probe (older snapshots and synthetic ones lack it).
        if parent is not None and role_of(parent) == "adopter":
            dep.kind = "orphaned_engine"
            dep.adopter = {"pid": root["ppid"], "name": shapes.exe_name(parent), "nspid": parent.get("nspid")}
    ray_workers = [p for p in dep.processes if is_ray_worker(p, by_pid)]
    if ray_workers or dep.root_pid in ray_ties or shapes.ray_backend_flag(root):
        dep.executor = "ray"
        gpus = shapes.gpu_index_by_pid(snap.data("nvml"), dep.processes)
        source = shapes.infer_ray_ranks(ray_workers, gpus, dep.configured.get("tp"), dep.configured.get("pp"))
        tie = ray_ties.get(dep.root_pid) or {"ties": ["process tree (raylet under the engine)"] if ray_workers else []}
        dep.ray = {"workers": [p["pid"] for p in ray_workers], "ties": tie.get("ties", []), "rank_source": source}
        if dep.kind == "ray_node":
            _local_order_only(dep, ray_workers)
        _ray_links(snap, dep, ray_workers)
        dep.ray["cluster"] = next((c for w in ray_workers if (c := shapes.ray_cluster_id(by_pid.get(w["ppid"])))), None)
        dep.ray["jobs"] = sorted({str(j) for w in ray_workers if (j := (w.get("environ") or {}).get("RAY_JOB_ID"))})


def _lone_worker_rank(dep: Deployment) -> None:
    """TP=1 under the multiprocessing executor (always on vLLM's CPU platform, on GPUs with
    ``--distributed-executor-backend mp``; real-vllm-cpu.md): the engine's only worker keeps the plain
    ``VLLM::Worker`` title, since every group size is 1 (vllm-internals 2.1). Its TP rank is 0; without
    it the GPU layer had no rank to judge (a wedged model step read "no stack picture explains it").
    A plain title among several workers is a worker still inside init_device, never given a rank."""
    if dep.executor != "mp" or dep.configured.get("tp", 1) != 1 or dep.configured.get("pp", 1) != 1:
        return
    for engine in dep.engines:
        kids = [w for w in dep.workers if w["ppid"] == engine["pid"]]
        if len(kids) != 1 or not kids[0].get("titled"):
            continue
        ranks = kids[0].get("ranks") or {}
        if "tp" not in ranks and set(ranks) <= {"dp"}:  # DP>1 titles carry only _DPn at TP=1
            kids[0]["ranks"] = {**ranks, "tp": 0}  # a new dict: the snapshot's stays as it was read
            kids[0]["rank_source"] = "the engine's only worker"
            served = (engine.get("ranks") or {}).get("dp")
            if "dp" not in ranks and isinstance(served, int):
                # Dense DP (real vllm-cpu 0.32): each EngineCore_DPn has one worker titled plain VLLM::Worker;
                # only its parent says which DP rank it serves. Not a "dp" rank: no DP collective joins them.
                kids[0]["dp_engine"] = served
                kids[0]["rank_source"] = f"the only worker of EngineCore_DP{served}"


def _dense_dp_engine(dep: Deployment) -> None:
    """Dense DP (real vllm-cpu 0.32): each EngineCore_DPn runs its own workers, titled without a DP rank
    (VLLM::Worker, VLLM::Worker_TPn); only their parent says which DP rank they serve. Recorded as
    ``dp_engine`` (not a "dp" rank: no DP collective joins them), so DP0's TP1 and DP1's TP1 are two ranks."""
    engines = {e["pid"]: (e.get("ranks") or {}).get("dp") for e in dep.engines}
    if len({d for d in engines.values() if isinstance(d, int)}) < 2:
        return
    for w in dep.with_role("worker", "worker_starting"):
        served = engines.get(w.get("ppid"))
        if "dp" not in (w.get("ranks") or {}) and isinstance(served, int):
            w["dp_engine"] = served


def _local_order_only(dep: Deployment, ray_workers: list[dict[str, Any]]) -> None:
    """A worker node's ranks come after the engine node's (RayExecutorV2 places the driver's node first):
    seen alone, only their order on this node is known. No TP number is made up (a partial group compared
    alone could blame innocents); the fleet analysis numbers them once it has found their engine."""
    for w in ray_workers:
        if "tp" in (w.get("ranks") or {}):
            w["ray_local_rank"] = int(w["ranks"]["tp"])
            w["ranks"], w["name"] = {}, "RayWorkerProc"
    dep.ray["rank_source"] = f"local order only ({dep.ray['rank_source']}); global ranks need the engine's node"


def _ray_links(snap: Snapshot, dep: Deployment, ray_workers: list[dict[str, Any]]) -> None:
    """Multi-node Ray: the engine's rpc-queue connections from workers on other nodes, and each local
    Ray worker's connections to other nodes (the fleet analysis pairs them; shapes.accepted_remote)."""
    if snap.status("sockets") not in ("ok", "partial"):
        dep.ray["links_seen"] = False
        return
    tcp = [e for e in snap.data("sockets").get("tcp") or [] if isinstance(e, dict)]
    # A process whose fds could not be read hides its end of a connection: a local peer would look remote.
    dep.ray["links_seen"] = not snap.data("sockets").get("unreadable_pids")
    dep.ray["remote_readers"] = [link for e in dep.engines for link in shapes.accepted_remote(tcp, e["pid"])]
    if dep.kind == "ray_node":
        dep.ray["links"] = {str(w["pid"]): shapes.remote_links(tcp, w["pid"]) for w in ray_workers}


def _checked(proc: Any) -> dict[str, Any]:
    if not isinstance(proc, dict):
        raise TypeError("process entry is not an object")
    for key in ("pid", "ppid"):
        if not isinstance(proc.get(key), int) or isinstance(proc.get(key), bool):
            raise TypeError(f"process {key} must be an integer")
    out = dict(proc)
    if not isinstance(out.get("ranks") or {}, dict):
        raise TypeError("process ranks must be an object")
    if out.get("exiting") is True and out.get("state") not in ("Z", "X") and \
            (out.get("num_threads") in (0, 1) or out.get("rss_bytes") == 0):
        # Being torn down by the kernel (killed or crashed; its memory or its last thread going):
        # dead for every rule, whatever its state letter still says; the letter seen is kept. (A main
        # thread that exits alone while others run also has PF_EXITING: threads and memory left.)
        out["state_seen"], out["state"] = out.get("state"), "X"
    return out


def _root_of(proc: dict[str, Any], by_pid: dict[int, dict[str, Any]]) -> int | None:
    # A raylet is a root only for Ray workers no engine claims (_tie_ray_workers).
    """The outermost ancestor (self included) with a root role, following ppid inside the snapshot."""
    root = None
    cur: dict[str, Any] | None = proc
    below: dict[str, Any] = proc
    seen = set()
    while cur is not None and cur["pid"] not in seen:
        seen.add(cur["pid"])
        # A user's Python claims only the vLLM processes it started in its own process group:
        # multiprocessing keeps the pgid; a launcher that puts each engine in its own session
        # (or a harness running several deployments) is not one deployment.
        if role_of(cur) in ROOT_ROLES and (role_of(cur) != "llm_client" or cur is proc
                                           or below.get("pgid") == cur.get("pgid")):
            root = cur["pid"]
        below = cur
        cur = by_pid.get(cur["ppid"])
    return root


def _mark_starting_workers(procs: list[dict[str, Any]], by_pid: dict[int, dict[str, Any]]) -> None:
    """A fork-started worker inherits its parent's title until it retitles itself: an EngineCore
    whose parent is an EngineCore is a worker still starting (vllm-internals 2.1)."""
    for p in procs:
        parent = by_pid.get(p["ppid"])
        if parent is None:
            continue
        if role_of(p) in ("engine_core", "spawn_child") and role_of(parent) == "engine_core":
            p["role"] = "worker_starting"


def _rank_key(proc: dict[str, Any]) -> tuple[int, ...]:
    ranks = proc.get("ranks") or {}
    return tuple(int(ranks.get(k, -1)) for k in ("dp", "pp", "pcp", "tp", "dcp", "ep"))


def _configured(root: dict[str, Any]) -> dict[str, int]:
    argv = [str(a) for a in root.get("cmdline", [])]
    out: dict[str, int] = {}
    for key, flags in _SIZE_FLAGS.items():
        for i, arg in enumerate(argv):
            name, _, inline = arg.partition("=")
            if name in flags:
                value = inline or (argv[i + 1] if i + 1 < len(argv) else "")
                if re.fullmatch(r"\d{1,4}", value):
                    out[key] = int(value)
    return out
