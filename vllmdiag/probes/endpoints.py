"""ZMQ endpoints of vLLM processes: who binds, who connects, stale ipc files, a ZMTP greeting each."""

from __future__ import annotations

import os
import re
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec, Skip
from vllmdiag.probes import _zmtp
from vllmdiag.probes._access import blind_reason
from vllmdiag.probes._procfs import read_text  # our own net/unix only: a miss is no /proc
from vllmdiag.probes._procfs import readlink as _readlink
from vllmdiag.probes.sockets import parse_unix

SPEC = ProbeSpec(name="endpoints", layer="handshake", description="ZMQ ipc/tcp endpoints, stale ipc files, ZMTP check",
                 requires=("processes", "sockets"), timeout_s=3.0)

# vLLM names every ipc endpoint ipc://{VLLM_RPC_BASE_PATH}/{uuid4()} (vllm-internals 1.8).
UUID4 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
API_ROLES = ("api_server", "api_server_child")
MAX_DIR_ENTRIES = 20000
MAX_STALE_LISTED = 200
ZMTP_BUDGET_S = 2.0
FIRST_WAIT_S = 0.25  # a live local listener answers in milliseconds
RETRY_WAIT_S = 1.2  # the second look, for those that did not answer the first (a loaded host)
# A silent listener of a process whose libzmq already greeted on another socket is not ZMQ (see
# _prompt_pids): its wait ends CUT_FACTOR times that greeting's latency later, never before CUT_MIN_S.
CUT_MIN_S = 0.1
CUT_FACTOR = 3.0
ZMQ_TCP_ROLES = {"api_server", "api_server_child", "engine_core", "dp_coordinator"}


def collect(ctx: Context) -> dict[str, Any] | Partial:
    procs = scope(ctx.data("processes").get("processes", []), ctx.options.pids)
    pids = {p["pid"] for p in procs}
    socks = ctx.data("sockets")
    seen = ctx.result("sockets")
    if seen is None or seen.status not in ("ok", "partial"):
        raise Skip("the sockets probe gave no socket table (see its status)")
    unix = [u for u in socks.get("unix", []) if set(u["pids"]) & pids]
    tcp = [t for t in socks.get("tcp", []) if set(t["pids"]) & pids]
    ipc = ipc_endpoints(unix)
    listen = [{"local": t["local"], "endpoint": "tcp://" + t["local"], "pids": t["pids"], "netns": t["netns"],
               "accepted": sum(1 for c in tcp if c["state"] == "ESTABLISHED" and c["local"] == t["local"])}
              for t in tcp if t["state"] == "LISTEN"]
    self_ns = {n: _readlink(ctx.proc("self", "ns", n)) for n in ("net", "mnt")}
    live = set(socks.get("live_unix_paths", [])) | {u["path"] for u in parse_unix(read_text(ctx.proc("self", "net/unix")) or "")}
    dirs = rpc_dirs(ctx, procs, self_ns["mnt"])
    stale, stale_total = stale_files(dirs, live)
    stopped = frozenset(p["pid"] for p in procs if p.get("state") in ("T", "t", "D", "Z", "X"))
    zmtp = check_all(ctx, zmtp_targets(procs, ipc, listen, self_ns, ctx.proc_root), stopped)
    # Listeners, binders and accepted counts all come from fds: pids whose fds were unreadable are
    # unknown here, and analysis must not read their absence as "endpoint gone" (issue 15, item 4).
    blind = sorted(pids & set(socks.get("unreadable_pids") or []))
    data = {"self_netns": self_ns["net"], "rpc_dirs": dirs, "ipc": ipc, "tcp_listen": listen,
            "processes": [per_process(p, unix, tcp) for p in procs], "stale_files": stale,
            "stale_total": stale_total, "zmtp": zmtp, "unreadable_pids": blind}
    if blind:
        return Partial(data, blind_reason("/proc/<pid>/fd", blind))
    return data


def scope(procs: list[dict[str, Any]], wanted: Any) -> list[dict[str, Any]]:
    """Processes of the deployments holding the wanted pids (ancestors, descendants, same pgid)."""
    if not wanted:
        return procs
    by_pid = {p["pid"]: p for p in procs}
    chosen = {int(w) for w in wanted}
    pgids = {by_pid[w].get("pgid") for w in chosen if w in by_pid}
    out = []
    for p in procs:
        cur: dict[str, Any] | None = p
        seen: set[int] = set()
        while cur is not None and cur["pid"] not in seen and cur["pid"] not in chosen:
            seen.add(cur["pid"])
            cur = by_pid.get(cur["ppid"])
        if (cur is not None and cur["pid"] in chosen) or p.get("pgid") in pgids:
            out.append(p)
    return out


def ipc_endpoints(unix: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Paths listened on; each accepted connection carries the listener's path in /proc/net/unix, so
    the count of accepted sockets is the number of connected peers (the client side has no path)."""
    out: dict[str, dict[str, Any]] = {}
    for u in unix:
        if u["path"] and u["listening"]:
            ep = out.setdefault(u["path"], {"path": u["path"], "endpoint": "ipc://" + _printable(u["path"]),
                                            "binders": [], "accepted": 0, "uuid_name": bool(UUID4.match(
                                                os.path.basename(u["path"])))})
            ep["binders"] = sorted(set(ep["binders"]) | set(u["pids"]))
    for u in unix:
        if u["path"] in out and not u["listening"] and u["state"] == "connected":
            out[u["path"]]["accepted"] += 1
    return sorted(out.values(), key=lambda e: e["path"])


def per_process(p: dict[str, Any], unix: list[dict[str, Any]], tcp: list[dict[str, Any]]) -> dict[str, Any]:
    pid = p["pid"]
    mine = [u for u in unix if pid in u["pids"]]
    conns = [t for t in tcp if pid in t["pids"]]
    return {"pid": pid, "role": p.get("role"), "zmq_contexts": p.get("zmq_contexts", 0),
            "http_port": http_port(p) if p.get("role") in API_ROLES else None,
            "listening": sorted({"ipc://" + _printable(u["path"]) for u in mine if u["listening"] and u["path"]}
                                | {"tcp://" + t["local"] for t in conns if t["state"] == "LISTEN"}),
            "unix_accepted": sum(1 for u in mine if u["path"] and not u["listening"]),
            "unix_connected_unnamed": sum(1 for u in mine if not u["path"] and u["state"] == "connected"),
            "unix_connecting": sum(1 for u in mine if u["state"] == "connecting"),
            "tcp_established": sum(1 for t in conns if t["state"] == "ESTABLISHED"),
            "tcp_syn_sent": sorted({t["remote"] for t in conns if t["state"] == "SYN_SENT"})}


def rpc_dirs(ctx: Context, procs: list[dict[str, Any]], self_mnt: str | None) -> list[str]:
    dirs = {str(ctx.rpc_base)}
    for p in procs:
        env = p.get("environ") or {}
        base = env.get("VLLM_RPC_BASE_PATH") or env.get("TMPDIR")
        if base and (p.get("ns", {}).get("mnt") in (None, self_mnt)):
            dirs.add(base.rstrip("/") or "/")
    return sorted(dirs)


def stale_files(dirs: list[str], live: set[str]) -> tuple[list[dict[str, Any]], int]:
    """uuid4-named socket files that no live socket uses (vLLM never unlinks MessageQueue paths)."""
    now = time.time()
    found: list[dict[str, Any]] = []
    for d in dirs:
        try:
            with os.scandir(d) as it:
                for i, entry in enumerate(it):
                    if i >= MAX_DIR_ENTRIES:
                        break
                    if not UUID4.match(entry.name) or entry.path in live:
                        continue
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue  # removed meanwhile
                    if stat.S_ISSOCK(st.st_mode):
                        # uid and mtime let analysis tell a live server's own unbound path from a leftover.
                        found.append({"name": entry.name, "path": entry.path, "mtime": round(st.st_mtime, 3),
                                      "age_s": round(max(0.0, now - st.st_mtime), 1), "uid": st.st_uid})
        except OSError:
            continue
    found.sort(key=lambda f: -f["mtime"])
    return found[:MAX_STALE_LISTED], len(found)


def zmtp_targets(procs: list[dict[str, Any]], ipc: list[dict[str, Any]], listen: list[dict[str, Any]],
                 self_ns: dict[str, str | None], proc_root: Path) -> list[tuple[str, str, list[int], str]]:
    """(endpoint to dial, fs_root, binder pids, listener endpoint) for every listener reachable from here."""
    by_pid = {p["pid"]: p for p in procs}
    api_pids = {p["pid"] for p in procs if p.get("role") in API_ROLES}
    http_ports = {http_port(by_pid[p]) for p in api_pids}
    ipc_api = any(ep["uuid_name"] and api_pids & set(ep["binders"]) for ep in ipc)
    out: list[tuple[str, str, list[int], str]] = []
    for ep in ipc:
        owner = by_pid.get(ep["binders"][0], {})
        mnt = owner.get("ns", {}).get("mnt")
        # A socket file in another mount namespace is reachable through /proc/<pid>/root (ctx's /proc).
        other = mnt not in (None, self_ns["mnt"]) and not ep["path"].startswith("\0")
        root = str(proc_root / str(owner.get("pid")) / "root") if other else ""
        out.append((ep["endpoint"], root, ep["binders"], ep["endpoint"]))
    for t in listen:
        if t.get("netns") not in (None, "?", self_ns["net"]):
            continue  # 127.0.0.1 here is another socket than 127.0.0.1 in its network namespace
        host, _, port = t["local"].rpartition(":")
        roles = {by_pid.get(p, {}).get("role") for p in t["pids"]}
        if not roles & ZMQ_TCP_ROLES:
            # Workers' TCP listeners are torch.distributed's TCPStore, gloo pairs and NCCL's bootstrap
            # and proxy sockets, never ZMQ: dialing them only costs the budget, and an unexpected
            # connection to NCCL's bootstrap listener makes it log (or worse). vLLM's ZMQ TCP sockets
            # belong to the API server, the EngineCore (remote rpc XPUB) and the DP coordinator.
            continue
        if roles & set(API_ROLES) and (int(port) in http_ports or ipc_api):
            # The HTTP port is not ZMQ (the http probe reads it); an API server talking to its engines
            # over ipc (local-only mode, vllm-internals 3.2) has no ZMQ TCP listener at all.
            continue
        host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
        out.append((f"tcp://{host}:{port}", "", t["pids"], t["endpoint"]))
    return out


def check_all(ctx: Context, targets: list[tuple[str, str, list[int], str]],
              stopped: frozenset[int] = frozenset()) -> list[dict[str, Any]]:
    if not targets:
        return []
    start = time.monotonic()
    budget = min(ctx.remaining(), ZMTP_BUDGET_S) - 0.2
    # libzmq answers a greeting from its own I/O thread, even when the Python above it is stuck, so
    # a live local listener answers in milliseconds: the first look is short.
    first = float(FIRST_WAIT_S if ctx.options.zmtp_timeout_s is None else ctx.options.zmtp_timeout_s)
    with ThreadPoolExecutor(max_workers=min(16, len(targets)), thread_name_prefix="zmtp") as pool:
        results = _round(pool, targets, first, budget, cut_short=True)
        # Under load (2 cores at load 5) a healthy endpoint missed 0.25 s and became a false finding
        # (issue 15, item 15): a timeout is a reason to look again, longer, never an answer. Listeners
        # held only by stopped or dead processes cannot answer; the process layer names those.
        again = [i for i, r in enumerate(results) if r["status"] == "timeout" and not set(targets[i][2]) <= stopped
                 and not set(targets[i][2]) & _prompt_pids(targets, results, first)]
        left = budget - (time.monotonic() - start)
        if again and left > first:  # room for a longer look than the first
            retry = _round(pool, [targets[i] for i in again], RETRY_WAIT_S, left)
            for i, r in zip(again, retry, strict=True):
                r["first_attempt"] = {k: results[i][k] for k in ("status", "reason", "latency_ms")}
                r["attempts"] = 2
                results[i] = r
    return results


def _prompt_pids(targets: list[tuple[str, str, list[int], str]], results: list[dict[str, Any]],
                 first_s: float) -> set[int]:
    """Pids whose libzmq answered another greeting well inside the first look. libzmq greets from its
    own I/O thread, so a silent listener of such a process is not slow: it is not ZMQ (a TCPStore,
    gloo or NCCL socket the EngineCore shares with its workers), and a second, longer look would only
    spend the budget every healthy triage waits for."""
    out: set[int] = set()
    for target, r in zip(targets, results, strict=True):
        if r["status"] == "ok" and float(r.get("latency_ms") or 0.0) < first_s * 500:
            out.update(target[2])
    return out


def _round(pool: ThreadPoolExecutor, targets: list[tuple[str, str, list[int], str]], want_s: float,
           budget_s: float, cut_short: bool = False) -> list[dict[str, Any]]:
    """One parallel round; the per-endpoint wait shrinks so that every round fits budget_s. With
    ``cut_short``, the looks run side by side and a silent TCP one ends once every process holding it
    has greeted promptly on another socket (the rule of _prompt_pids, applied while waiting, so a healthy
    EngineCore's TCPStore listener no longer holds the round for the whole first look)."""
    rounds = -(-len(targets) // min(16, len(targets)))
    per = max(0.05, min(want_s, budget_s / rounds))
    prompt: dict[int, float] = {}  # pid -> latency (s) of its prompt greeting on some socket
    lock = threading.Lock()

    def give_up(pids: list[int], waited: float) -> str | None:
        with lock:
            seen = [prompt[p] for p in pids if p in prompt]
        if not pids or len(seen) < len(pids) or waited < max(CUT_MIN_S, CUT_FACTOR * max(seen)):
            return None
        return (f"pid(s) {', '.join(map(str, pids[:4]))} greeted on another socket within {max(seen) * 1000:.0f} ms, "
                "so this silent listener is not ZMQ (a TCPStore, gloo or NCCL socket)")

    def look(t: tuple[str, str, list[int], str]) -> dict[str, Any]:
        # TCP only: torch's TCPStore, gloo and NCCL listen on TCP; vLLM's ipc sockets are all ZMQ, so a
        # silent one gets the whole look (and its info finding) as before.
        early = cut_short and t[0].startswith("tcp://")
        r = _zmtp.check(t[0], per, fs_root=t[1], give_up=(lambda w: give_up(t[2], w)) if early else None)
        if r["status"] == "ok" and float(r.get("latency_ms") or 0.0) < want_s * 500:
            with lock:
                for pid in t[2]:
                    prompt[pid] = min(prompt.get(pid, 1e9), float(r["latency_ms"]) / 1000)
        return {**r, "pids": t[2], "listener": t[3], "attempts": 1, "wait_s": round(per, 3)}

    return list(pool.map(look, targets))


def http_port(proc: dict[str, Any]) -> int:
    argv = [str(a) for a in proc.get("cmdline", [])]
    for i, arg in enumerate(argv):
        name, _, inline = arg.partition("=")
        value = inline or (argv[i + 1] if i + 1 < len(argv) else "")
        if name == "--port" and value.isdigit():
            return int(value)
    return 8000


def _printable(path: str) -> str:
    return "@" + path[1:] if path.startswith("\0") else path


