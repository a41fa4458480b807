"""Group a snapshot's processes into deployments: one API server / EngineCore tree each (pure).

Several deployments per node are normal (8 x TP=1). Workers orphaned by a dead EngineCore are
reparented to PID 1 or a subreaper, so the tree no longer links them to their API server; the
process group does (fork keeps the pgid), so orphans rejoin the deployment that shares it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from vllmdiag.model import Snapshot

ROOT_ROLES = ("api_server", "engine_core", "dp_coordinator")
ROLE_ORDER = {"api_server": 0, "api_server_child": 1, "dp_coordinator": 2, "engine_core": 3, "worker": 4,
              "worker_starting": 5, "resource_tracker": 8}
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
    if role_of(proc) == "api_server":
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
    procs = [_checked(p) for p in snapshot.data("processes").get("processes", [])]
    by_pid = {p["pid"]: p for p in procs}
    _mark_starting_workers(procs, by_pid)
    roots: dict[int, Deployment] = {}
    owner: dict[int, int] = {}
    for p in sorted(procs, key=lambda p: p["pid"]):
        root = _root_of(p, by_pid)
        if root is not None:
            owner[p["pid"]] = root
    by_pgid = {by_pid[r]["pgid"]: r for r in set(owner.values()) if by_pid[r].get("pgid")}
    for p in procs:
        if p["pid"] in owner or role_of(p) not in ("worker", "worker_starting"):
            continue
        owner[p["pid"]] = by_pgid.get(p.get("pgid"), p["pid"])  # orphan: rejoin by pgid or stand alone
    for p in procs:
        if p["pid"] not in owner and role_of(p) == "resource_tracker" and p["ppid"] in owner:
            owner[p["pid"]] = owner[p["ppid"]]
    for pid, root in owner.items():
        if root not in roots:
            roots[root] = Deployment(id=f"{snapshot.node}:{root}", node=snapshot.node, root_pid=root,
                                     configured=_configured(by_pid[root]),
                                     headless="--headless" in by_pid[root].get("cmdline", []))
        roots[root].processes.append(by_pid[pid])
    for dep in roots.values():
        dep.processes.sort(key=lambda p: (ROLE_ORDER.get(role_of(p), 7), _rank_key(p), p["pid"]))
    return sorted(roots.values(), key=lambda d: d.root_pid)


def _checked(proc: Any) -> dict[str, Any]:
    if not isinstance(proc, dict):
        raise TypeError("process entry is not an object")
    for key in ("pid", "ppid"):
        if not isinstance(proc.get(key), int) or isinstance(proc.get(key), bool):
            raise TypeError(f"process {key} must be an integer")
    out = dict(proc)
    if not isinstance(out.get("ranks") or {}, dict):
        raise TypeError("process ranks must be an object")
    return out


def _root_of(proc: dict[str, Any], by_pid: dict[int, dict[str, Any]]) -> int | None:
    """The outermost ancestor (self included) with a root role, following ppid inside the snapshot."""
    root = None
    cur: dict[str, Any] | None = proc
    seen = set()
    while cur is not None and cur["pid"] not in seen:
        seen.add(cur["pid"])
        if role_of(cur) in ROOT_ROLES:
            root = cur["pid"]
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
