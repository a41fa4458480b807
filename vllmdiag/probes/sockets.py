"""Unix and TCP sockets of vLLM processes: inode -> pid, listening vs connected, queues, ipc paths."""

from __future__ import annotations

import socket
import struct
from collections.abc import Container
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec
from vllmdiag.probes._access import DENIED, blind_reason, fd_targets
from vllmdiag.probes._procfs import GONE, ProcMiss, read_proc

SPEC = ProbeSpec(name="sockets", layer="handshake", description="unix/tcp sockets per vLLM process",
                 requires=("processes",), timeout_s=3.0)

TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "03": "SYN_RECV", "04": "FIN_WAIT1", "05": "FIN_WAIT2",
              "06": "TIME_WAIT", "07": "CLOSE", "08": "CLOSE_WAIT", "09": "LAST_ACK", "0A": "LISTEN",
              "0B": "CLOSING"}
SO_ACCEPTCON = 0x10000


def collect(ctx: Context) -> dict[str, Any] | Partial:
    procs = ctx.data("processes").get("processes", [])
    if ctx.options.cheap:  # the watcher only needs the API servers' HTTP listeners
        procs = [p for p in procs if p.get("role") in ("api_server", "api_server_child")]
    owners: dict[int, list[int]] = {}
    netns_pids: dict[str, list[int]] = {}
    unreadable: list[int] = []
    for proc in procs:
        inodes = socket_inodes(ctx, proc["pid"])
        if inodes is None:
            unreadable.append(proc["pid"])
            continue
        for inode in inodes:
            owners.setdefault(inode, []).append(proc["pid"])
        netns_pids.setdefault(proc.get("ns", {}).get("net") or "?", []).append(proc["pid"])
    unix: list[dict[str, Any]] = []
    tcp: list[dict[str, Any]] = []
    live_paths: set[str] = set()
    tables_denied: list[int] = []  # a namespace's tables we may not read (/proc hidepid=1): its sockets unseen
    for ns, pids in sorted(netns_pids.items()):
        # The first pid may have exited since the processes probe (another deployment shutting down):
        # reading its net/unix then fails and would hide every socket of the namespace; try the next.
        rep, text, denied = pids[0], "", False
        for pid in pids:
            got = _read_unix(ctx, pid)
            if isinstance(got, str):
                rep, text, denied = pid, got, False  # another pid's table of the same namespace serves
                break
            denied |= got is DENIED
        for entry in parse_unix(text):
            if entry["path"]:
                live_paths.add(entry["path"])
            if entry["inode"] in owners:
                unix.append({**entry, "pids": owners[entry["inode"]], "netns": ns})
        for fname, fam in (("net/tcp", 4), ("net/tcp6", 6)):
            got = read_proc(ctx.proc(rep, fname))  # GONE: the pid exited, or no IPv6: nothing to list
            denied |= got is DENIED
            for entry in parse_tcp(got if isinstance(got, str) else "", fam, owners):
                if entry["inode"] in owners:
                    tcp.append({**entry, "pids": owners[entry["inode"]], "netns": ns})
        if denied:
            tables_denied += pids
    # A pid whose fds we could not read has an unknown socket count (None), never 0: "0 sockets"
    # would read as "the endpoint is gone" (issue 15, item 4).
    data = {"unix": unix, "tcp": tcp, "live_unix_paths": sorted(live_paths),
            "socket_fds": {str(p["pid"]): None if p["pid"] in unreadable else
                           sum(1 for pids in owners.values() if p["pid"] in pids) for p in procs},
            "unreadable_pids": sorted(set(unreadable) | set(tables_denied))}
    why = ([blind_reason("/proc/<pid>/fd", unreadable)] if unreadable else []) + (
        [blind_reason("/proc/<pid>/net tables", tables_denied)] if tables_denied else [])
    if why:
        return Partial(data, "; ".join(why))
    return data


def _read_unix(ctx: Context, pid: int) -> str | ProcMiss:
    if ctx.options.cheap:  # the HTTP listener is TCP; net/unix lists every socket of the host
        return "" if ctx.proc(pid).exists() else GONE
    return read_proc(ctx.proc(pid, "net/unix"))


def socket_inodes(ctx: Context, pid: int) -> list[int] | None:
    """Socket inodes held by pid; [] when it is gone; None when its fds may not be read."""
    targets = fd_targets(ctx.proc(pid, "fd"))
    if not isinstance(targets, list):
        return None if targets is DENIED else []
    return [int(t[8:-1]) for t in targets if t.startswith("socket:[")]


def parse_unix(text: str) -> list[dict[str, Any]]:
    """/proc/net/unix: Num RefCount Protocol Flags Type St Inode [Path]."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines()[1:]:
        parts = line.split(None, 7)
        if len(parts) < 7:
            continue
        flags = int(parts[3], 16)
        path = parts[7].strip() if len(parts) > 7 else ""
        out.append({
            "inode": int(parts[6]),
            "path": path.replace("@", "\0", 1) if path.startswith("@") else path,
            "listening": bool(flags & SO_ACCEPTCON),
            "type": {"0001": "stream", "0002": "dgram", "0005": "seqpacket"}.get(parts[4], parts[4]),
            "state": {"01": "unconnected", "02": "connecting", "03": "connected", "04": "disconnecting"}
            .get(parts[5], parts[5]),
        })
    return out


def parse_tcp(text: str, family: int, only: Container[int] | None = None) -> list[dict[str, Any]]:
    """/proc/net/tcp[6] rows; ``only``: keep the rows of these inodes (a busy host lists thousands of
    other sockets, and decoding their addresses was most of the probe's time)."""
    out: list[dict[str, Any]] = []
    for line in text.splitlines()[1:]:
        parts = line.split()
        if len(parts) < 10 or (only is not None and int(parts[9]) not in only):
            continue
        tx, rx = parts[4].split(":")
        out.append({
            "local": _addr(parts[1], family),
            "remote": _addr(parts[2], family),
            "state": TCP_STATES.get(parts[3], parts[3]),
            "send_q": int(tx, 16),
            "recv_q": int(rx, 16),
            "inode": int(parts[9]),
            "family": family,
        })
    return out


def _addr(hexaddr: str, family: int) -> str:
    host, port = hexaddr.split(":")
    raw = bytes.fromhex(host)
    if family == 4:
        ip = socket.inet_ntop(socket.AF_INET, raw[::-1])
        return f"{ip}:{int(port, 16)}"
    # /proc/net/tcp6 stores four little-endian 32-bit words.
    words = struct.unpack("<4I", raw)
    ip = socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))
    return f"[{ip}]:{int(port, 16)}"
