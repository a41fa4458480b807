"""`shm-leak`: `psm_*` files exactly as a SIGKILLed deployment leaves them.

The creator of a vLLM ring never got to `unlink()`, and its resource tracker died in the same
kill, so the files stay with their last flags. They are written with plain file I/O: no
`SharedMemory`, so no resource tracker of ours can ever unlink (or claim) them.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from vllmdiag_sim import ringfmt

if TYPE_CHECKING:
    from vllmdiag_sim.deployment import Deployment


def shm_dir(dep: Deployment) -> Path:
    if dep.namespace:
        # The node's private tmpfs, seen through one of its processes.
        return Path(f"/proc/{dep.root_pid}/root/dev/shm")
    return Path("/dev/shm")


def write_dead_ring(path: Path, geo: ringfmt.Geometry, rpc: tuple[object, ...]) -> None:
    """Slot 0 written and read by everyone, the rest never used."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.ftruncate(fd, geo.total_bytes)
        os.pwrite(fd, ringfmt.chunk_bytes(ringfmt.encode(rpc)), geo.chunk_offset(0))
        os.pwrite(fd, bytes([1] * geo.metadata_size), geo.flags_offset(0))
    finally:
        os.close(fd)


def leak_segments(dep: Deployment, rank: int) -> None:
    root = shm_dir(dep)
    rings = [(ringfmt.rpc_geometry(max(1, dep.tp // dep.nnodes)), ("execute_model", ({"step": 1},), {}, 0)),
             (ringfmt.response_geometry(), ("SUCCESS", {"step": 1}))]
    for geo, payload in rings:
        name = f"psm_{secrets.token_hex(4)}"
        write_dead_ring(root / name, geo, payload)
        dep.leaked.append(name)
    dep.save()
