"""Deployment shapes beyond `vllm serve` + multiprocessing: offline `LLM()` scripts, engines
orphaned by a dead API server, and Ray executor workers (pure; used by deployments.py).

What real vLLM shows (0.33; vllm-internals 2.1, 3.1, 3.1b):
- Offline `LLM()`: the user's Python is the EngineCore's parent (multiprocessing), or, with
  `VLLM_ENABLE_V1_MULTIPROCESSING=0`, runs the engine itself and is the workers' parent. vLLM only
  ever starts these processes from its own Python code, so a Python parent is their client.
- Orphaned engine (vLLM #55510): the API server was killed; the kernel reparents the EngineCore to
  the nearest subreaper or the init of its pid namespace (a container's entrypoint shell, tini,
  systemd). Neither is a Python vLLM client.
- Ray: workers are Ray actors, children of `raylet`, titled by Ray. When the engine itself started
  Ray (`ray.init()` without a cluster) the raylet is the engine's descendant and the tree links them;
  with a cluster started beforehand (`ray start`, KubeRay) nothing in the tree does. RayExecutorV2
  workers on the engine's node map the engine's rpc ring segment (shared memory): that ties them.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.views import nvml_pids

# Inits and subreapers: they adopt orphans (PR_SET_CHILD_SUBREAPER is not visible in /proc, names are).
ADOPTERS = ("init", "systemd", "tini", "dumb-init", "catatonit", "s6-svscan", "s6-supervise", "runsv",
            "containerd-shim", "containerd-shim-runc-v2", "conmon", "docker-init", "runit", "openrc-init")
RAY_FILES = ("ray/", "ray_executor", "ray_distributed_executor", "ray_utils.py", "compiled_dag")


def exe_name(proc: dict[str, Any]) -> str:
    argv = [str(a) for a in proc.get("cmdline") or [] if a]
    head = argv[0].rsplit("/", 1)[-1] if argv else ""
    return head or str(proc.get("comm") or "")


def is_python(proc: dict[str, Any]) -> bool:
    name = exe_name(proc)
    return name.startswith("python") or str(proc.get("comm") or "").startswith("python")


def parent_kind(proc: dict[str, Any], client_evidence: set[int] | None) -> str:
    """What a described parent of an engine/worker is: ``raylet``, ``llm_client`` (a user's Python
    that runs vLLM's engine client) or ``adopter`` (init, a subreaper, a shell).

    A Python that is init of its pid namespace may be either (``docker run ... python run.py`` vs a
    Python init reaping orphans): it is the client only with evidence of one, i.e. it listens on a
    unix socket (the engine's ZMQ ROUTER/PULL) or maps a vLLM ring (in-process engine).
    ``client_evidence`` None means the sockets/shm probes did not see enough to tell."""
    if proc.get("role") == "raylet":
        return "raylet"
    argv = [str(a) for a in proc.get("cmdline") or []]
    script = argv[1].rsplit("/", 1)[-1] if len(argv) > 1 else ""
    ns_init = proc["pid"] == 1 or (proc.get("nspid") or [0])[-1] == 1
    if exe_name(proc) in ADOPTERS or script in ADOPTERS:
        return "adopter"
    if not is_python(proc):
        # vLLM never starts an engine from a shell; only init of a namespace (a container's
        # entrypoint shell, #55510) adopts one. Anything else we cannot explain: no claim.
        return "adopter" if ns_init else "unknown"
    if ns_init and client_evidence is not None and proc["pid"] not in client_evidence and not inprocess_engine(proc):
        return "adopter"
    return "llm_client"


def client_evidence(sockets: dict[str, Any] | None, shm: dict[str, Any] | None) -> set[int] | None:
    """Pids that listen on a unix socket or map a psm_ ring; None if either probe saw nothing."""
    if not sockets or not shm:
        return None
    out = {p for u in sockets.get("unix") or [] if u.get("listening") for p in u.get("pids") or []}
    out |= {p for s in shm.get("segments") or [] if str(s.get("name", "")).startswith("psm_")
            for p in s.get("mapped_by") or []}
    return {p for p in out if isinstance(p, int)}


def runs_engine(proc: dict[str, Any], nvml_pids: set[int]) -> bool:
    """An untitled Python that maps vLLM's compiled kernels (processes probe, ``vllm_mapped``) runs an
    engine in-process when it also uses a GPU (a ``/dev/nvidiaN`` fd, or NVML lists it: NVML pids are
    translated to ours by ``gpu_index_by_pid``) or was started with ``VLLM_ENABLE_V1_MULTIPROCESSING=0``.
    Importing the kernels alone (a tool, a test) is not an engine. The variable is also often set
    in the script (``os.environ``), which /proc/<pid>/environ does not show: the GPU says it then."""
    if not proc.get("vllm_extensions"):
        return False
    devices = [str(d) for d in proc.get("gpu_fds") or []]
    gpu = any(d.removeprefix("/dev/nvidia").isdigit() for d in devices) or proc.get("pid") in nvml_pids
    return gpu or inprocess_engine(proc)


def inprocess_evidence(proc: dict[str, Any], nvml_pids: set[int]) -> dict[str, Any]:
    """What ``runs_engine`` went by, for the report: the kernels, the GPU (fds, NVML), the setting."""
    return {"extensions": [str(e).rsplit("/", 2)[-2] + "/" + str(e).rsplit("/", 1)[-1]
                           for e in (proc.get("vllm_extensions") or [])[:2]],
            "gpu_fds": [str(d) for d in proc.get("gpu_fds") or [] if str(d).removeprefix("/dev/nvidia").isdigit()],
            "nvml": proc.get("pid") in nvml_pids, "multiprocessing_off": inprocess_engine(proc)}


def unchecked_pythons(snap: Any) -> str | None:
    """A sentence when the processes probe could not read the maps of some Python processes (another
    user's, without root; or maps past the read bound): an in-process engine there would go unseen."""
    scan = snap.data("processes").get("inprocess_scan") or {}
    denied = [p for p in scan.get("unreadable_pids") or [] if isinstance(p, int)]
    cut = [p for p in scan.get("truncated_pids") or [] if isinstance(p, int)]
    late = [p for p in scan.get("unchecked_pids") or [] if isinstance(p, int)]
    if not denied and not cut and not late:
        return None
    parts = ([f"could not read the memory maps of {len(denied)} Python process(es) (pid {', '.join(map(str, denied[:8]))}: "
              "permission denied)"] if denied else []) + (
        [f"read only the start of the maps of pid {', '.join(map(str, cut[:8]))}"] if cut else []) + (
        [f"ran out of time before reading the maps of {len(late)} Python process(es) (pid "
         f"{', '.join(map(str, late[:8]))})"] if late else [])
    return f"{snap.node}: " + "; ".join(parts) + ": an in-process vLLM engine (LLM() at TP=1) there would not be seen."


def inprocess_engine(root: dict[str, Any] | None) -> bool:
    return root is not None and str((root.get("environ") or {}).get("VLLM_ENABLE_V1_MULTIPROCESSING", "1")) == "0"


def ray_backend_flag(root: dict[str, Any] | None) -> bool:
    """`--distributed-executor-backend ray` (or `=ray`) on the API server's command line."""
    argv = [str(a) for a in (root or {}).get("cmdline") or []]
    for i, arg in enumerate(argv):
        name, _, inline = arg.partition("=")
        if name == "--distributed-executor-backend":
            value = inline or (argv[i + 1] if i + 1 < len(argv) else "")
            return value == "ray"
    return False


def stack_mentions_ray(dump: dict[str, Any] | None) -> bool:
    for t in (dump or {}).get("threads") or []:
        for f in t.get("frames") or []:
            path = str(f.get("filename") or f.get("short_filename") or "") if isinstance(f, dict) else str(f[1])
            if any(k in path for k in RAY_FILES):
                return True
    return False


def shm_ties(segments: list[dict[str, Any]]) -> dict[int, set[int]]:
    """pid -> pids that map a common psm_ segment (a vLLM ring) with it."""
    out: dict[int, set[int]] = {}
    for s in segments:
        if not str(s.get("name", "")).startswith("psm_"):
            continue
        pids = {p for p in s.get("mapped_by") or [] if isinstance(p, int)}
        for p in pids:
            out.setdefault(p, set()).update(pids - {p})
    return out


def gpu_index_by_pid(nvml: dict[str, Any], procs: list[dict[str, Any]]) -> dict[int, int]:
    """pid -> GPU index from NVML's process lists. NVML reports pids of the namespace the driver
    sees (the host's); nvml_pids maps them (NSpid chains from the host, device nodes inside a pod)."""
    return dict(nvml_pids.pid_map(nvml, procs).gpu_of)


def infer_ray_ranks(workers: list[dict[str, Any]], gpus: dict[int, int], tp: int | None, pp: int | None) -> str:
    """Give Ray-titled workers (no rank in their title) a rank: RayExecutorV2 gives rank r the r-th of
    the node's GPUs in sorted order (local_rank = index, GPU = sorted ids[local_rank]). Without NVML,
    pid order is a guess and said so. Returns how ranks were found."""
    todo = [w for w in workers if "tp" not in (w.get("ranks") or {})]
    if not todo:
        return "title"
    source = "nvml-gpu-order" if all(w["pid"] in gpus for w in todo) else "pid-order"
    todo.sort(key=lambda w: (gpus.get(w["pid"], 1 << 20) if source != "pid-order" else 0, w["pid"]))
    tp_size = tp or max(1, len(todo) // max(1, pp or 1))
    for g, w in enumerate(todo):
        ranks = {"tp": g % tp_size}
        if (pp or 1) > 1:
            ranks["pp"] = g // tp_size
        w["ranks"] = ranks
        w["rank_source"] = source
        w["name"] = "Worker" + "".join(f"_{k.upper()}{v}" for k, v in sorted(ranks.items(), key=lambda kv: kv[0] != "pp"))
    return source


# ---- Ray across nodes (vLLM 0.33 RayExecutorV2) -------------------------------------------------
# Ranks on other nodes than the engine read its rpc MessageQueue over TCP: the engine binds an XPUB on
# its node's Ray IP (`tcp://{ip}:0`) and each remote worker's SUB connects to it. So the engine holds one
# accepted connection per remote rank whose other end no process of its own node owns, and the worker on
# the other node holds the same connection reversed: that pair ties them across nodes, exactly.


def remote_links(tcp: list[dict[str, Any]], pid: int) -> list[dict[str, str]]:
    """Established TCP connections of ``pid`` whose other end no process seen on this node owns."""
    here = {str(e.get("local")) for e in tcp}
    return [{"local": str(e["local"]), "remote": str(e["remote"])} for e in tcp
            if e.get("state") == "ESTABLISHED" and pid in (e.get("pids") or []) and str(e.get("remote")) not in here]


def accepted_remote(tcp: list[dict[str, Any]], pid: int) -> list[dict[str, str]]:
    """``remote_links`` of ``pid`` on a port it listens on: peers that connected to it (remote readers)."""
    ports = {str(e.get("local")).rsplit(":", 1)[-1] for e in tcp
             if e.get("state") == "LISTEN" and pid in (e.get("pids") or [])}
    return [link for link in remote_links(tcp, pid) if link["local"].rsplit(":", 1)[-1] in ports]


_CLUSTER_FLAGS = ("--session_name", "--session-name", "--gcs-address", "--gcs_address")


def ray_cluster_id(raylet: dict[str, Any] | None) -> str | None:
    """The Ray cluster a raylet belongs to, from its command line: every raylet of one cluster is started
    with the head's session name and GCS address (`ray start --address` fetches them from the GCS)."""
    if raylet is None or raylet.get("role") != "raylet":
        return None
    found: dict[str, str] = {}
    for arg in (str(a) for a in raylet.get("cmdline") or []):
        name, eq, value = arg.partition("=")
        if eq and name in _CLUSTER_FLAGS and value:
            found.setdefault(name.replace("_", "-"), value[:200])
    session, gcs = found.get("--session-name"), found.get("--gcs-address")
    return f"session {session}" if session else f"gcs {gcs}" if gcs else None


def ranks_on_other_nodes(dep: Any) -> bool:
    """A Ray engine's node whose TP/PP group goes on on other nodes (or may: its sockets were unreadable):
    its local ranks waiting alike prove no uniform hang, the odd one out may be elsewhere."""
    if getattr(dep, "executor", None) != "ray" or dep.kind == "ray_node":
        return False
    world = (dep.configured.get("tp") or 1) * (dep.configured.get("pp") or 1)
    return len(dep.workers) < world and bool(dep.ray.get("remote_readers") or dep.ray.get("links_seen") is False)
