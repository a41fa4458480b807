"""Queue layer: which shm ring stopped moving, who is behind, and is /dev/shm healthy? (pure)

Roles come from who maps a ring (vllm-internals 1.12 step 3), reader indices from ranks (step 4).
Only stable facts count: a ring must have been sampled at least twice, >= ~100 ms apart, with
the same unread counts and no flag change. Blame follows "waits-for" edges: the writer of a full
ring waits on its blocked readers, so the culprit is the first process in that chain that is not
itself blocked writing another ring (an EngineCore stuck on a full rpc ring reads no replies).
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import Deployment, display_title
from vllmdiag.analysis.views.ring_roles import MiB, RingRole
from vllmdiag.model import Culprit, Finding, Snapshot
from vllmdiag.vocab.shm_names import by_kind, leftovers, segment_kind, unseen_maps

LAYER = "queue"
CODES = ("queue.ring_full", "queue.reader_lagging", "queue.response_unread", "queue.readers_all_behind",
         "queue.shm_leaked", "queue.shm_low", "queue.shm_nearly_full", "queue.shm_entries_skipped")
NEARLY_FULL_FRACTION = 0.1
# What a killed run leaves behind is one list for every command: vllmdiag/vocab/shm_names.py (issue 33). No age
# threshold here: a creator maps its segment microseconds after creating it, and a ring being torn down is
# told apart by the rings probe (`unlinked` while it was sampled).


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    roles = facts.rings
    out = _ring_findings(snapshot, [r for r in roles if r.deployment is not None and r.sampled])
    return out + _shm_health(snapshot, deployments, roles)


# ---- rings -------------------------------------------------------------------------------------------
Key = int | str  # a pid, or "<ring>#<i>" for a reader with no live process


def _key(role: RingRole, i: int) -> Key:
    p = role.readers[i] if i < len(role.readers) else None
    return p["pid"] if p else f"{role.name}#{i}"


def _ring_findings(snap: Snapshot, roles: list[RingRole]) -> list[Finding]:
    full = [r for r in roles if r.ring.get("full") and r.ring.get("blocked_on") and not r.ring.get("moved")]
    waits: dict[Key, list[Key]] = {}
    engines: set[Key] = set()
    for r in full:
        if r.writer:
            waits.setdefault(r.writer["pid"], []).extend(_key(r, i) for i in r.ring["blocked_on"])
        if r.role == "worker_response_mq" and r.readers and r.readers[0]:
            engines.add(r.readers[0]["pid"])
    out = []
    for r in roles:
        stable = r.ring.get("stable_unread") or []
        if r in full:
            out.append(_full(snap, r, waits, engines))
        elif not r.ring.get("moved") and stable and None not in stable and max(stable) > 0:
            out.append(_behind(snap, r, stable, waits, engines))
    return out


def _root(start: Key, waits: dict[Key, list[Key]], engines: set[Key]) -> Key:
    """Follow waits-for edges to a process that is not blocked itself. In a cycle (EngineCore
    blocked on a worker that is blocked on the EngineCore's unread replies) the EngineCore that
    stopped reading replies is the root: a worker only stops reading rpc because it is blocked."""
    path, cur = [start], start
    while cur in waits:
        cur = waits[cur][0]
        if cur in path:
            cycle = path[path.index(cur):]
            return next((k for k in cycle if k in engines), cur)
        path.append(cur)
    return cur


def _full(snap: Snapshot, r: RingRole, waits: dict[Key, list[Key]], engines: set[Key]) -> Finding:
    blocked = list(r.ring["blocked_on"])
    roots = {_root(_key(r, i), waits, engines) for i in blocked}
    explained = roots != {_key(r, i) for i in blocked}
    code = "queue.response_unread" if r.role == "worker_response_mq" else "queue.ring_full"
    who = ", ".join(r.reader_label(i) for i in blocked)
    if len(blocked) == r.ring["geometry"]["n_reader"] > 1 and not explained:
        return _emit(snap, r, "queue.readers_all_behind", "warning", blocked,
                     f"{_what(r)} is full and every reader ({who}) is behind: no single laggard; look at the gpu layer.")
    what = f"{_what(r)} is full ({r.ring['geometry']['max_chunks']} slots unread by {who}); the writer " \
           f"{_label(r.writer)} is blocked in acquire_write"
    if explained:
        return _emit(snap, r, code, "info", blocked, what + f", but {who} is itself blocked writing a full ring.")
    return _emit(snap, r, code, "critical", blocked, what + f" on {who}.")


def _behind(snap: Snapshot, r: RingRole, stable: list[int], waits: dict[Key, list[Key]], engines: set[Key]
            ) -> Finding:
    lagging = sorted((i for i, u in enumerate(stable) if u > 0), key=lambda i: -stable[i])
    caught_up = [i for i, u in enumerate(stable) if u == 0]
    who = ", ".join(f"{r.reader_label(i)} {stable[i]} unread" for i in lagging)
    explained = any(_root(_key(r, i), waits, engines) != _key(r, i) for i in lagging)
    if r.role == "worker_response_mq":
        msg = f"{_what(r)} holds {stable[0]} unread replies and nothing moved: the EngineCore stopped reading them"
        return _emit(snap, r, "queue.response_unread", "info" if explained else "critical", lagging,
                     msg + (", because it is blocked writing a full ring." if explained else "."))
    if not caught_up:
        # Every reader one or two steps behind is also what a long forward pass looks like.
        return _emit(snap, r, "queue.readers_all_behind", "info", lagging,
                     f"{_what(r)}: every reader is behind ({who}) and nothing moved while sampled.")
    return _emit(snap, r, "queue.reader_lagging", "info" if explained else "critical", lagging,
                 f"{_what(r)}: {who} while the other readers are caught up, and nothing moved while sampled"
                 + (" (the reader is itself blocked writing a full ring)." if explained else "."))


def _emit(snap: Snapshot, r: RingRole, code: str, severity: str, blame: list[int], message: str) -> Finding:
    ring = r.ring
    culprits = [_culprit(snap, r, i) for i in blame] if severity == "critical" else []
    readers = [p["pid"] if p else None for p in r.readers]
    evidence = {"ring": r.name, "path": ring.get("path"), "role": r.role, "geometry": ring.get("geometry"),
                "stable_unread": ring.get("stable_unread"), "blocked_on": ring.get("blocked_on"), "readers": blame,
                "reader_pids": readers, "writer_pid": r.writer["pid"] if r.writer else None,
                "samples": ring.get("sample_count"), "window_s": ring.get("window_s"), "moved": ring.get("moved"),
                "writer_index": ring.get("writer_index"), "last_method": ring.get("last_method")}
    pids = [p for p in [evidence["writer_pid"]] + readers if isinstance(p, int)]
    return finding(code, LAYER, severity, snap, r.deployment, message, pids, evidence, culprits)


def _culprit(snap: Snapshot, r: RingRole, i: int) -> Culprit:
    p = r.readers[i] if i < len(r.readers) else None
    unread = (r.ring.get("stable_unread") or [None] * (i + 1))[i]
    reason = f"stopped reading {r.role} {r.name}: reader {i}, {unread} slots unread"
    if p is None:
        return Culprit(snap.node, None, "worker", i, f"reader {i}", reason + " (no live process)")
    return culprit(snap, p, reason)


def _what(r: RingRole) -> str:
    names = {"rpc_broadcast_mq": "rpc ring", "worker_response_mq": "response ring", "group_broadcaster": "group broadcaster"}
    owner = f" of {_label(r.writer)}" if r.role == "worker_response_mq" else ""
    return f"{names.get(r.role, 'ring')}{owner} {r.name}"


def _label(p: dict[str, Any] | None) -> str:
    return f"{display_title(p)} (pid {p['pid']})" if p else "(writer gone)"


# ---- /dev/shm health -----------------------------------------------------------------------------------
def _shm_health(snap: Snapshot, deployments: list[Deployment], roles: list[RingRole]) -> list[Finding]:
    shm = snap.data("shm")
    out = []
    # The same list as the gate's shm_leaks check; a ring the rings probe saw unlinked is being torn down.
    leaked = leftovers(shm.get("segments", []), torn_down={r.name for r in roles if r.ring.get("unlinked")})
    if leaked:
        held = sum(int(s.get("allocated_bytes") or 0) for s in leaked)
        names = ", ".join(str(s["name"]) for s in leaked[:6]) + (" ..." if len(leaked) > 6 else "")
        evidence = {"segments": [{k: s.get(k) for k in ("name", "path", "kind", "what", "size_bytes", "allocated_bytes",
                                                         "age_s")}
                                 for s in leaked[:32]], "count": len(leaked), "allocated_bytes": held,
                    "dir": str(leaked[0].get("path", "/dev/shm/x")).rsplit("/", 1)[0]}
        culprits = [Culprit(snap.node, None, "shm_segment", None, str(s["name"]),
                            f"{s['what']}, "
                            f"mapped by no process, {int(s.get('allocated_bytes') or 0) / MiB:.1f} MiB held, "
                            f"{float(s.get('age_s') or 0):.0f} s old") for s in leaked[:4]]
        # "Mapped by no process" holds only if every process's maps could be read (issue 15, item 4).
        unseen = unseen_maps(shm)
        evidence["unreadable_maps"] = unseen
        blind_note = (f" Unsure: the memory maps of {unseen} process(es) could not be read (permission denied), "
                      "so some of these may still be in use.") if unseen else ""
        out.append(finding("queue.shm_leaked", LAYER, "info" if unseen else "warning", snap, None,
                           f"{len(leaked)} /dev/shm segment(s) mapped by no process (leaked by a killed run) hold "
                           f"{held / MiB:.1f} MiB ({by_kind(leaked)}): {names}.{blind_note}", [], evidence,
                           culprits if not unseen else []))
    out += _skipped(snap)
    for root in shm.get("roots", []):
        usage = root.get("usage") or {}
        size, free = int(usage.get("size_bytes") or 0), int(usage.get("free_bytes") or 0)
        if size and free < NEARLY_FULL_FRACTION * size:
            out.append(finding("queue.shm_nearly_full", LAYER, "warning", snap, None,
                               f"{root.get('dir')} is nearly full: {free / MiB:.0f} MiB free of {size / MiB:.0f} MiB.",
                               [], {"dir": root.get("dir"), "size_bytes": size, "free_bytes": free}, []))
        out += _shm_low(snap, deployments, roles, root, free)
    return out


def deployment_buffers(snap: Snapshot, dep: Deployment) -> list[dict[str, Any]]:
    """The deployment's CPU all-reduce buffers: tied to it by the processes that map them."""
    return [{**s, "kind": "vllm_cpushm"} for s in snap.data("shm").get("segments", []) if isinstance(s, dict)
            and segment_kind(s) == "vllm_cpushm" and set(s.get("mapped_by") or []) & dep.pids]


def _shm_low(snap: Snapshot, deployments: list[Deployment], roles: list[RingRole], root: dict[str, Any], free: int
             ) -> list[Finding]:
    """tmpfs allocates a ring's (or a CPU all-reduce buffer's) pages on first touch: pages not touched
    yet may need `free` later (SIGBUS before 0.33's check_shm_free_space; vllm-internals 1.10)."""
    out = []
    for dep in deployments:
        mine = [r.ring for r in roles if r.deployment is dep and str(r.ring.get("path", "")).startswith(str(root.get("dir")))]
        mine += [b for b in deployment_buffers(snap, dep) if str(b.get("path", "")).startswith(str(root.get("dir")))]
        need = sum(max(0, int(r.get("size_bytes") or 0) - int(r.get("allocated_bytes") or 0)) for r in mine)
        if mine and free < need:
            out.append(finding("queue.shm_low", LAYER, "warning", snap, dep,
                               f"{root.get('dir')} has {free / MiB:.0f} MiB free but this deployment's {len(mine)} segments "
                               f"may still touch {need / MiB:.0f} MiB: a large message can die with SIGBUS.", [],
                               {"dir": root.get("dir"), "free_bytes": free, "need_bytes": need,
                                "rings": [r.get("name") for r in mine]}, []))
    return out


def _skipped(snap: Snapshot) -> list[Finding]:
    """A flooded /dev/shm is capped (the segments vLLM maps are always examined): say what was left."""
    dirs = [d for d in snap.data("shm").get("skipped") or [] if isinstance(d, dict) and d.get("count")]
    rings = snap.data("rings").get("skipped") or {}
    if not dirs and not (isinstance(rings, dict) and rings.get("count")):
        return []
    parts = [f"{int(d['count'])} entries of {d.get('dir')} not examined ({d.get('reason')})" for d in dirs]
    if isinstance(rings, dict) and rings.get("count"):
        parts.append(f"{int(rings['count'])} psm_* segment(s) not decoded ({rings.get('reason')})")
    return [finding("queue.shm_entries_skipped", LAYER, "info", snap, None,
                    "/dev/shm holds more than the probes examine: " + "; ".join(parts) + ".", [],
                    {"dir": str(dirs[0].get("dir")) if dirs else "/dev/shm", "shm": dirs, "rings": rings}, [])]
