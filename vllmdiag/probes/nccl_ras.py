"""NCCL RAS (NCCL >= 2.24): ask the job's RAS service once for its per-communicator state.

Opt-in (``--nccl-ras``): one TCP connection to localhost:28028, the text protocol of NCCL's own
``ncclras`` client (``CLIENT PROTOCOL 2`` -> ``SERVER PROTOCOL n``, ``TIMEOUT t`` -> ``OK``, then
``STATUS``; the report follows until the server closes). Never a loop: polling RAS has crashed
jobs (NCCL issues #1718, #1762).
"""

from __future__ import annotations

import re
import socket
import time
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import ProbeSpec, Skip

SPEC = ProbeSpec(name="nccl_ras", layer="gpu", description="NCCL RAS per-communicator state (opt-in, one query)",
                 timeout_s=8.0, default=False)
PORT, PROTOCOL = 28028, 2
RAS_TIMEOUT_S = 3  # how long NCCL's RAS threads may wait for each other; the report comes after it
MAX_BYTES = 1 << 20
_ROW = re.compile(r"^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\S+)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+(\S+)\s*$")
_ISSUE = re.compile(r"^#(\d+-\d+) \(([0-9a-f]+)\) (INCOMPLETE|MISMATCH|ERROR)$")
_RANK = re.compile(r"Rank (\d+)(?: has status (\w+))?.*?(?:process (\d+) on node (\S+))?$")
_PROC = re.compile(r"Process (\d+) on node (\S+)")


def collect(ctx: Context) -> dict[str, Any]:
    host, port = str(ctx.options.nccl_ras_host or "localhost"), int(ctx.options.nccl_ras_port or PORT)
    deadline = time.monotonic() + min(SPEC.timeout_s - 1, ctx.remaining())
    try:
        text, server_protocol = query(host, port, deadline)
    except ConnectionRefusedError:
        raise Skip(f"no NCCL RAS service on {host}:{port} (NCCL < 2.24, NCCL_RAS_ENABLE=0, or another "
                   "NCCL_RAS_ADDR)") from None
    except (OSError, ValueError) as exc:
        raise Skip(f"NCCL RAS on {host}:{port} did not answer: {exc}") from None
    return {"address": f"{host}:{port}", "server_protocol": server_protocol, **parse_status(text), "text": text[:16384]}


def query(host: str, port: int, deadline: float) -> tuple[str, str]:
    with socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic())) as sock:
        reader = sock.makefile("rb")
        sock.sendall(f"CLIENT PROTOCOL {PROTOCOL}\n".encode())
        hello = reader.readline(256).decode("ascii", "replace").strip()
        if not hello.upper().startswith("SERVER PROTOCOL"):
            raise ValueError(f"unexpected greeting {hello[:80]!r}")
        sock.sendall(f"TIMEOUT {RAS_TIMEOUT_S}\n".encode())
        if reader.readline(256).decode("ascii", "replace").strip().upper() != "OK":
            raise ValueError("TIMEOUT not accepted")
        sock.sendall(b"STATUS\n")
        chunks, size = [], 0
        while size < MAX_BYTES:
            sock.settimeout(max(0.05, deadline - time.monotonic()))
            chunk = reader.read1(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks).decode("utf-8", "replace"), hello.split()[-1]


def parse_status(text: str) -> dict[str, Any]:
    """The ``ncclras`` text report -> communicator groups and the issues listed under Errors/Warnings."""
    comms, issues, dead = [], [], None
    current: dict[str, Any] | None = None
    for line in text.splitlines():
        if m := _ROW.match(line):
            comms.append({"group": int(m[1]), "comms": int(m[2]), "nodes": int(m[3]), "ranks_per_node": m[4],
                          "ranks_per_comm": int(m[5]), "ranks_in_group": int(m[6]), "status": m[7], "errors": m[8]})
        elif m := _ISSUE.match(line.strip()):
            current = {"comm": m[1], "hash": m[2], "kind": m[3], "lines": [], "ranks": []}
            issues.append(current)
        elif line.strip() in ("DEAD", "INCOMPLETE", "TIMEOUT"):
            current = {"comm": None, "kind": line.strip(), "lines": [], "ranks": []}
            issues.append(current)
        elif current is not None and line.startswith("  "):
            current["lines"].append(line.strip())
            if r := _RANK.search(line):
                current["ranks"].append({"rank": int(r[1]), "status": r[2], "pid": int(r[3]) if r[3] else None,
                                         "node": r[4]})
            elif p := _PROC.search(line):
                current["ranks"].append({"rank": None, "status": current["kind"], "pid": int(p[1]), "node": p[2]})
            elif "considered dead" in line:
                dead = int(line.split()[0])
        elif not line.strip():
            current = None
    return {"communicators": comms, "issues": issues, "dead_processes": dead}
