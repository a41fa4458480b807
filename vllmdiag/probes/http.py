"""The API server's HTTP side: listeners, /health, /metrics twice, client connections' queues twice."""

from __future__ import annotations

import json
import math
import os
import re
import sys
import time
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec, Skip
from vllmdiag.probes._access import blind_reason
from vllmdiag.probes._httpget import BadResponse, describe, request
from vllmdiag.probes._procfs import DENIED, read_cmdline, read_proc, read_text, redact_argv
from vllmdiag.probes._procfs import readlink as _readlink
from vllmdiag.probes.endpoints import API_ROLES, http_port, scope
from vllmdiag.probes.sockets import parse_tcp, socket_inodes

SPEC = ProbeSpec(name="http", layer="client", description="API server /health, /metrics, client send queues",
                 requires=("processes", "sockets"), timeout_s=20.0, sampler=True, opens_window=True)

METRICS = {"vllm:num_requests_running": "running", "vllm:num_requests_waiting": "waiting",
           "vllm:generation_tokens_total": "generation_tokens", "vllm:prompt_tokens_total": "prompt_tokens"}
# Kept only when the server exports them: NIXL's connector counters (vLLM 0.33
# kv_connector/v1/nixl/stats.py NixlPromMetrics; prometheus_client adds _total, a histogram's _count counts
# the completed transfers).
OPTIONAL = {"vllm:nixl_num_failed_transfers_total": "kv_failed_transfers",
            "vllm:nixl_num_kv_expired_reqs_total": "kv_expired_requests",
            "vllm:nixl_xfer_time_seconds_count": "kv_transfers"}
# Series kept per label value (vLLM 0.33 vllm/v1/metrics/loggers.py): the KV-fetch stages exist only on a
# kv_consumer (P/D decode instance); "deferred" waiting requests include those parked for remote KV.
LABELED = {"vllm:num_requests_kv_fetch_by_stage": ("stage", "kv_fetch_", ("waiting_to_start", "in_progress",
                                                                         "completed_waiting")),
           "vllm:num_requests_waiting_by_reason": ("reason", "waiting_", ("deferred",))}
# Tables where a socket inode shows once it listens or connects; a TCP socket that is only bound
# (vLLM reserves the HTTP port long before listen(), vllm-internals 3.3 step 8) is in none of them.
NET_TABLES = {"tcp": 9, "tcp6": 9, "udp": 9, "udp6": 9, "raw": 9, "raw6": 9, "udplite": 9, "udplite6": 9, "unix": 6,
              "netlink": 9, "packet": 8}  # table -> column of the inode
MIN_GAP_S = 0.1  # Send-Q and token counters; taken when the slow probes are back, so usually longer; --rates stretches it
RESERVE_S = 1.5  # kept for the second sample after waiting for the other probes
MAX_BODY = 8 << 20
MAX_DROPPED = 5  # /metrics values refused (not finite, negative) named in the sample
# With DP every series carries engine="N" (one per DP rank): kept per engine too, so one DP rank's tokens never
# vouch for another's (issue 33). Bounded: an untrusted body cannot make more keys than this.
MAX_ENGINES = 64
_ENGINE = re.compile(r'(?:^|[{,])\s*engine="(\d{1,4})"')
_NAME = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{)?")


def collect(ctx: Context) -> dict[str, Any] | Partial:
    start = time.monotonic()
    procs = scope(ctx.data("processes").get("processes", []), ctx.options.pids)
    api = [p for p in procs if p.get("role") in API_ROLES]
    if not api:
        raise Skip("no vLLM API server process (offline LLM engine, or no deployment)")
    socks = ctx.data("sockets")
    servers = find_servers(socks, {p["pid"] for p in api}, _readlink(ctx.proc("self", "ns", "net")),
                           {p["pid"]: http_port(p) for p in api})
    # options.cheap: the watcher's pass every few seconds wants /metrics twice and nothing else
    # (no /health, no client queues): the rest is for the triage a stall opens.
    cheap = ctx.options.cheap
    out: dict[str, Any] = {"api_servers": [] if cheap else [_api_info(ctx, p, socks) for p in api], "servers": servers}
    _mark_stopped(servers, api)
    gets = [s for s in servers if s["same_netns"] and "not_asked" not in s]
    for s in [] if cheap else [s for s in servers if not s["same_netns"] and "not_asked" not in s]:
        # A container's API server: the same read-only GETs from inside its network namespace.
        s["netns_pid"] = s["pids"][0]
        s["health"], first = netns_get(ctx, s, ["/health", "/metrics"], min(2.0, max(0.2, ctx.remaining() / 4)))
        s["metrics"] = [_as_metrics(first, start)] if first else []
    t0 = _two_samples(ctx, servers, gets, cheap, start)
    out["sample_gap_s"] = round(time.monotonic() - t0, 3)
    for s in servers:
        s["connections"] = list(s["connections"].values())
        if not cheap:
            _find_peers(ctx, s)
    return _with_blind_spots(out, api, servers, socks)


def _mark_stopped(servers: list[dict[str, Any]], api: list[dict[str, Any]]) -> None:
    """A stopped API server (SIGSTOP, a debugger) cannot answer: asking would only wait out each GET's
    deadline (2 s for /metrics, 2 s for /health: a 5 s triage on a real server). The processes probe
    saw it stopped; the server says it was not asked, and why."""
    stopped = {p["pid"] for p in api if p.get("state") in ("T", "t")}
    for s in servers:
        if set(s["pids"]) <= stopped:
            s["not_asked"] = (f"the API server (pid {', '.join(map(str, s['pids']))}) is stopped (state T): "
                              "no HTTP request can be answered")


def _two_samples(ctx: Context, servers: list[dict[str, Any]], gets: list[dict[str, Any]], cheap: bool,
                 start: float) -> float:
    """/metrics and the client queues twice, /health and the probe request between: the window's start."""
    step = min(2.0, max(0.2, ctx.remaining() / 4))
    # The counters first: the window between the two /metrics samples counts from the moment the last
    # server's first one was asked for, and /health and the client queues are read inside it, not before.
    t0 = time.monotonic()
    for s in gets:
        t0 = time.monotonic()
        s["metrics"] = [metrics_sample(s, step, start)]
    ctx.open_window()
    for s in [] if cheap else servers:
        _sample_conns(ctx, s, 0)
    for s in gets:
        if not cheap:
            s["health"] = get(s["host"], s["port"], "/health", step)
        if ctx.options.probe_request:
            limit = float(ctx.options.probe_request_timeout_s)
            s["probe_request"] = probe_request(s, min(limit, ctx.remaining() - RESERVE_S))
    # Second sample near the end of the triage (samplers overlap the slow probes), at least MIN_GAP_S later.
    end = min(start + SPEC.timeout_s, t0 + ctx.remaining()) - RESERVE_S
    ctx.wait_others(end - time.monotonic())
    time.sleep(max(0.0, min(t0 + MIN_GAP_S, end) - time.monotonic()))
    for s in [] if cheap else servers:
        _sample_conns(ctx, s, 1)
    for s in gets:
        s["metrics"].append(metrics_sample(s, min(1.0, max(0.05, ctx.remaining() - 0.3)), start))
    for s in [s for s in servers if s.get("netns_pid") and s.get("metrics")]:
        _, again = netns_get(ctx, s, ["/metrics"], min(1.0, max(0.2, ctx.remaining() - 0.3)))
        if again:
            s["metrics"].append(_as_metrics(again, start))
    return t0


def _with_blind_spots(out: dict[str, Any], api: list[dict[str, Any]], servers: list[dict[str, Any]],
                      socks: dict[str, Any]) -> dict[str, Any] | Partial:
    """The probe's answer, Partial with why where the HTTP side was not wholly seen."""
    # Listeners and client connections come from the API server's fds: unreadable fds mean the
    # HTTP side was not seen, which is not "no listener" (issue 15, item 4).
    blind = sorted({p["pid"] for p in api} & set(socks.get("unreadable_pids") or []))
    tables = sorted(({pid for s in servers if s.get("tables_unreadable") for pid in s["pids"]}
                     | {a["pid"] for a in out["api_servers"] if a.get("tables_unreadable")}) - set(blind))
    dropped = sorted({d for s in servers for m in s.get("metrics") or [] for d in m.get("metrics_dropped") or []})
    why = ([blind_reason("/proc/<pid>/fd", blind)] if blind else []) + (
        [blind_reason("/proc/<pid>/net/tcp", tables)] if tables else [])
    blind = sorted(blind + tables)
    if dropped:  # said where a person reads it, not only in the sample (issue 25 item 7)
        why.append("/metrics values dropped (not finite or negative): " + ", ".join(dropped[:MAX_DROPPED]))
    if blind:
        out["unreadable_pids"] = blind
    return Partial(out, "; ".join(why)) if why else out


def find_servers(socks: dict[str, Any], api_pids: set[int], self_net: str | None,
                 http_ports: dict[int, int] | None = None) -> list[dict[str, Any]]:
    """One entry per TCP listening address held by an API server (several API servers share one).

    An API server also listens on ports that do not speak HTTP: with data parallelism rank 0's holds
    the c10d TCPStore of the DP group and, for remote engines, ZMQ ROUTER/PULL sockets on TCP (vLLM 0.33
    v1/engine/utils.py launch_core_engines). A GET there is a message on a vLLM socket (DESIGN
    principle 1; it broke the sim's DP rendezvous). So when an API server listens on its configured
    HTTP port (`--port`, default 8000), that listener is its only HTTP server."""
    http_ports = http_ports or {}
    listening = [t for t in socks.get("tcp", []) if t["state"] == "LISTEN" and api_pids & set(t["pids"])]
    on_port = {pid for t in listening for pid in t["pids"] if http_ports.get(pid) == _port(t["local"])}
    servers: dict[str, dict[str, Any]] = {}
    for t in listening:
        if not any(pid not in on_port or http_ports.get(pid) == _port(t["local"]) for pid in api_pids & set(t["pids"])):
            continue
        host, _, port = t["local"].rpartition(":")
        host = {"0.0.0.0": "127.0.0.1", "[::]": "[::1]"}.get(host, host)
        servers.setdefault(t["local"], {"address": t["local"], "host": host.strip("[]"), "port": int(port),
                                        "pids": sorted(api_pids & set(t["pids"])), "connections": {},
                                        "same_netns": t.get("netns") in (None, "?", self_net)})
    return list(servers.values())


def _port(address: str) -> int | None:
    tail = address.rpartition(":")[2]
    return int(tail) if tail.isdigit() else None


def _api_info(ctx: Context, p: dict[str, Any], socks: dict[str, Any]) -> dict[str, Any]:
    pid = p["pid"]
    held = socket_inodes(ctx, pid)
    # The sockets probe already found most of them in net/tcp, tcp6 and unix: only the rest is looked
    # up in every table (reading a busy host's tables again cost ~10 ms).
    known = {e["inode"] for table in ("tcp", "unix") for e in socks.get(table, []) if isinstance(e, dict)}
    rest = set(held or []) - known
    listed = _listed_inodes(ctx, pid) if held is not None and rest else set()
    # None: unknown (fds or a table not ours to read), never "bound and not listening".
    unlisted = None if held is None or listed is None else sorted(rest - listed) if rest else []
    return {"pid": pid, "role": p.get("role"), "age_s": p.get("age_s"), "cfg_port": http_port(p),
            "tcp_listen": sorted(t["local"] for t in socks.get("tcp", []) if t["state"] == "LISTEN" and pid in t["pids"]),
            "unix_listen": sorted(u["path"] for u in socks.get("unix", []) if u["listening"] and pid in u["pids"]),
            "unlisted_socket_inodes": None if unlisted is None else unlisted[:64],
            **({"tables_unreadable": "denied"} if listed is None else {})}


def _listed_inodes(ctx: Context, pid: int) -> set[int] | None:
    """Inodes listed in the pid's net tables; None when one may not be read (a table the kernel lacks: GONE)."""
    listed: set[int] = set()
    for table, idx in NET_TABLES.items():
        text = read_proc(ctx.proc(pid, "net", table))
        if text is DENIED:
            return None
        for line in (text if isinstance(text, str) else "").splitlines()[1:]:
            parts = line.split()
            if len(parts) > idx and parts[idx].isdigit():
                listed.add(int(parts[idx]))
    return listed


def _sample_conns(ctx: Context, server: dict[str, Any], i: int) -> None:
    mine: set[int] = set()
    for pid in server["pids"]:
        mine |= set(socket_inodes(ctx, pid) or [])
    table = _tcp_table(ctx, server["pids"][0], server["port"])
    if table is None:
        server["tables_unreadable"] = "denied"  # no connection seen is not "no client connected"
        return
    # A local client's socket is in the same table: its Recv-Q says whether it holds unread bytes.
    peers = {(e["local"], e["remote"]): e for e in table}
    for e in table:
        if e["inode"] not in mine or e["state"] == "LISTEN" or not e["local"].endswith(f":{server['port']}"):
            continue
        c = server["connections"].setdefault((e["local"], e["remote"]), {
            "local": e["local"], "remote": e["remote"], "inode": e["inode"], "send_q": [None, None],
            "recv_q": [None, None], "state": [None, None], "peer_recv_q": [None, None], "peer": None})
        c["send_q"][i], c["recv_q"][i], c["state"][i] = e["send_q"], e["recv_q"], e["state"]
        peer = peers.get((e["remote"], e["local"]))
        c["peer_recv_q"][i] = peer["recv_q"] if peer else None


def _tcp_table(ctx: Context, pid: int, port: int) -> list[dict[str, Any]] | None:
    """The rows with ``port`` at either end (the server's side and a local client's): a busy host's
    table has thousands of other rows, and parsing each cost more than the read. None: denied."""
    mark = f":{port:04X} "
    texts = [(read_proc(ctx.proc(pid, fname)), fam) for fname, fam in (("net/tcp", 4), ("net/tcp6", 6))]
    if any(text is DENIED for text, _ in texts):
        return None
    return [e for text, fam in texts for e in parse_tcp(_rows_with(text if isinstance(text, str) else "", mark), fam)]


def _rows_with(text: str, mark: str) -> str:
    lines = text.splitlines()
    return "\n".join(lines[:1] + [line for line in lines[1:] if mark in line])


def _find_peers(ctx: Context, server: dict[str, Any]) -> None:
    """Only for connections whose Send-Q did not drain: the local peer socket, then the pid holding it."""
    suspects = [c for c in server["connections"] if None not in c["send_q"] and 0 < c["send_q"][0] <= c["send_q"][1]]
    if not suspects:
        return
    table = _tcp_table(ctx, server["pids"][0], server["port"]) or []  # denied: said by _sample_conns
    want: dict[int, dict[str, Any]] = {}
    for c in suspects:
        peer = next((e for e in table if e["local"] == c["remote"] and e["remote"] == c["local"]), None)
        if peer is not None:
            c["peer"] = {"inode": peer["inode"], "recv_q": peer["recv_q"], "send_q": peer["send_q"], "pid": None}
            want[peer["inode"]] = c["peer"]
    for name in os.listdir(ctx.proc_root):
        if not want or ctx.remaining() < 0.2:
            break
        if name.isdigit():
            for inode in set(socket_inodes(ctx, int(name)) or []) & set(want):
                peer = want.pop(inode)
                peer["pid"] = int(name)
                peer["comm"] = (read_text(ctx.proc(name, "comm")) or "").strip()  # a name only: a miss is none
                peer["cmdline"] = " ".join(redact_argv(read_cmdline(ctx.proc(name)) or []))[:160]


def netns_get(ctx: Context, server: dict[str, Any], paths: list[str], timeout_s: float
              ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """(/health result, /metrics result) fetched from inside the server's network namespace by a
    short-lived child (probes/_netns_get.py); an error result says why when it could not."""
    argv = [sys.executable, "-m", "vllmdiag.probes._netns_get", str(ctx.proc(server["netns_pid"], "ns", "net")),
            server["host"], str(server["port"]), str(timeout_s), *paths]
    res = ctx.run(argv, timeout_s + 1.5)
    try:
        results = json.loads(res.stdout.strip().splitlines()[-1]).get("results") if res.stdout.strip() else None
        why = None if results is not None else json.loads(res.stdout.strip().splitlines()[-1]).get("error")
    except (ValueError, IndexError, AttributeError):
        results, why = None, None
    if results is None:
        err = {"status": None, "error": why or ("timeout" if res.timed_out else res.error or res.stderr.strip()[-200:]
                                                 or "no answer"), "netns": True}
        return err, None
    by_path = {r.get("path"): {**r, "netns": True} for r in results if isinstance(r, dict)}
    return by_path.get("/health"), by_path.get("/metrics")


def _as_metrics(res: dict[str, Any], since: float) -> dict[str, Any]:
    body = res.pop("body", None)
    res["at_s"] = round(time.monotonic() - since, 3)
    if body is not None and res.get("status") == 200:
        res.update(parse_metrics(body))
    return res


def metrics_sample(server: dict[str, Any], timeout_s: float, since: float) -> dict[str, Any]:
    res = get(server["host"], server["port"], "/metrics", timeout_s, keep_body=True)
    body = res.pop("body", None)
    res["at_s"] = round(time.monotonic() - since, 3)
    if body is not None and res.get("status") == 200:
        res.update(parse_metrics(body))
    return res


def probe_request(server: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """One max_tokens=1 completion: the only proof that workers answer (/health does not ask them)."""
    if timeout_s <= 0.2:
        return {"status": None, "error": "no time left"}
    models = get(server["host"], server["port"], "/v1/models", min(1.0, timeout_s / 4), keep_body=True)
    model = None
    try:
        model = json.loads(models.get("body") or "{}")["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    payload = {"prompt": "ping", "max_tokens": 1, "temperature": 0, **({"model": model} if model else {})}
    res = get(server["host"], server["port"], "/v1/completions", timeout_s - (models.get("latency_ms") or 0) / 1000,
              body=json.dumps(payload).encode())
    res["model"] = model
    return res


def get(host: str, port: int, path: str, timeout_s: float, *, keep_body: bool = False,
        body: bytes | None = None) -> dict[str, Any]:
    start = time.monotonic()
    out: dict[str, Any] = {"path": path, "status": None, "error": None}
    try:
        out["status"], data, cut = request(host, port, path, timeout_s, body=body, max_body=MAX_BODY)
        if cut:  # the deadline ended the body: a cut /metrics would read as wrong counters, keep none
            out["error"] = "timeout"
        elif keep_body:
            out["body"] = data.decode("utf-8", "replace")
    except (OSError, BadResponse) as exc:
        out.update(describe(exc))
    out["latency_ms"] = round((time.monotonic() - start) * 1000, 1)
    return out


def parse_metrics(text: str) -> dict[str, Any]:
    """Sums of the vLLM series we use over all label sets (one per engine with DP), Prometheus text.

    The body is untrusted: every series we keep is a count (a counter or a gauge of requests), so a
    value that is not finite or is negative (``NaN``, ``1e400``, ``-5``), or a sum that overflows, is
    dropped, and ``metrics_dropped`` says which (at most MAX_DROPPED, then how many more): such a
    value must neither reach the report's strict JSON nor read as progress."""
    sums: dict[str, Any] = dict.fromkeys(METRICS.values())
    by_engine: dict[str, dict[str, float]] = {}
    dropped: list[str] = []
    for line in text.splitlines():
        m = _NAME.match(line)
        key = (METRICS.get(m.group(1)) or OPTIONAL.get(m.group(1))) if m else None
        if m is not None and key is None and m.group(1) in LABELED and m.group(2):
            key = _labeled_key(m.group(1), line[m.end():_close_brace(line, m.end() - 1)])
        if m is None or key is None:
            continue
        pos = _close_brace(line, m.end() - 1) + 1 if m.group(2) else m.end()
        try:
            raw = line[pos:].split()[0]
            value = float(raw)
        except (ValueError, IndexError):
            continue
        total = (sums.get(key) or 0.0) + value
        if not (math.isfinite(value) and value >= 0 and math.isfinite(total)):
            dropped.append(f"{m.group(1)} {raw[:24]}")
            continue
        sums[key] = total
        engine = _ENGINE.search(line, m.end() - 1, pos) if m.group(2) else None
        if engine is not None and (engine.group(1) in by_engine or len(by_engine) < MAX_ENGINES):
            mine = by_engine.setdefault(engine.group(1), {})
            mine[key] = mine.get(key, 0.0) + value
    if by_engine:
        sums["by_engine"] = by_engine
    if dropped:
        more = len(dropped) - MAX_DROPPED
        sums["metrics_dropped"] = dropped[:MAX_DROPPED] + ([f"... and {more} more"] if more > 0 else [])
    return sums


def _labeled_key(name: str, labels: str) -> str | None:
    """``kv_fetch_in_progress`` for ``stage="in_progress"``: only the label values vLLM writes, so an
    untrusted body cannot invent keys."""
    label, prefix, values = LABELED[name]
    for value in values:
        if f'{label}="{value}"' in labels:
            return prefix + value
    return None


def _close_brace(line: str, start: int) -> int:
    quoted = escaped = False
    for i in range(start, len(line)):
        ch = line[i]
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "}" and not quoted:
            return i
    return len(line)


