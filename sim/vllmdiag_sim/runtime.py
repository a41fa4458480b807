"""Glue between the simulated vLLM processes and the sim launcher: paths, records, acks.

Every simulated process finds its deployment directory through `VLLMDIAG_SIM_DIR` (inherited
over fork). Records are append-only text files, so a process that dies mid-start still leaves
the launcher enough to clean up what it created.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

ENV_DIR = "VLLMDIAG_SIM_DIR"
ENV_API_TAG = "VLLMDIAG_SIM_API_TAG"  # a second API server in one sim deployment (dp-external): its records' suffix
ENV_INIT_HANG = "VLLMDIAG_SIM_INIT_HANG_RANK"  # start fault init-odd-rank: this rank hangs in NCCL init
# Readers spin this long after a message before blocking in poll. vLLM spins 1 s; the sim
# spins briefly because tests run many deployments on 2 cores.
BUSY_LOOP_S = 0.002
# Pause inside each `sched_yield` so a writer stuck on a full ring keeps vLLM's frames
# (`acquire_write` -> `sched_yield`) without burning a whole core.
YIELD_SLEEP_S = 0.001
# One decode step while requests run (about 30 tokens/s per request).
STEP_INTERVAL_S = 0.03


def free_port() -> int:
    """A TCP port free on loopback now, for a listener started a moment later.

    Taken below the kernel's ephemeral range (ip_local_port_range): a port from that range can be
    handed to someone's outgoing connection between our pick and the server's bind (seen: EADDRINUSE
    with many loopback connections), a port below it only to another explicit binder."""
    import random
    import socket

    low = _ephemeral_low()
    rng = random.SystemRandom()
    for _ in range(64):
        port = rng.randrange(max(1024, low - 12000), low)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded range: the kernel's pick, as before
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def deployment_dir() -> Path | None:
    value = os.environ.get(ENV_DIR)
    return Path(value) if value else None


def record(kind: str, value: str) -> None:
    """Append one line to `<dir>/<kind>.txt` (segments, ipc paths) for `sim down`."""
    base = deployment_dir()
    if base is None:
        return
    fd = os.open(base / f"{kind}.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (value + "\n").encode())
    finally:
        os.close(fd)


def read_records(base: Path, kind: str) -> list[str]:
    try:
        return [line for line in (base / f"{kind}.txt").read_text().splitlines() if line]
    except FileNotFoundError:
        return []


def ack(event: str) -> None:
    """Tell the launcher that `event` happened (e.g. a fault reached its hang point)."""
    base = deployment_dir()
    if base is None:
        return
    (base / "acks").mkdir(exist_ok=True)
    (base / "acks" / event).write_text(str(time.time()))


def write_json(path: Path, data: Any) -> None:
    """Atomic replace, so a concurrent reader never sees half a file."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return None


class FaultWatch:
    """Cheap change detection on `<dir>/fault.json` (one stat per check)."""

    def __init__(self) -> None:
        base = deployment_dir()
        self.path = base / "fault.json" if base else None
        self.seen_seq = -1

    def poll(self) -> dict[str, Any] | None:
        if self.path is None:
            return None
        spec = read_json(self.path)
        if not isinstance(spec, dict) or spec.get("seq", -1) <= self.seen_seq:
            return None
        self.seen_seq = int(spec["seq"])
        return spec


_acked_waits: set[str] = set()


def note_blocked(what: str, elapsed_s: float) -> None:
    """Ack once per process when a wait has clearly stopped making progress."""
    if elapsed_s > 0.2 and what not in _acked_waits:
        _acked_waits.add(what)
        ack(f"{what}-{os.getpid()}")


def close_inherited_listeners(ipc_addrs: list[str]) -> None:
    """Close fds on the parent's listening ipc sockets that fork copied into this process.

    Otherwise a fault that closes the API server's ROUTER would leave the socket listening
    through the EngineCore's inherited copy, and the endpoint would not really be gone.
    """
    paths = {a.removeprefix("ipc://") for a in ipc_addrs}
    with open("/proc/net/unix") as f:
        inodes = {line.split()[6] for line in f.readlines()[1:]
                  if len(line.split()) > 7 and line.split()[7] in paths}
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").removeprefix("socket:[").rstrip("]") in inodes:
                os.close(int(fd))
        except OSError:
            pass
