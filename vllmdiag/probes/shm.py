"""/dev/shm entries (psm_*, vllm_*, nccl-*): size, allocated bytes, age, and who maps each one.

Only stat() and /proc/<pid>/maps are read: never open a segment through multiprocessing's
SharedMemory, whose resource tracker can unlink a live segment (vllm-internals 1.12).
Segments of containerised processes are reached through /proc/<pid>/root/dev/shm.
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import ProbeSpec
from vllmdiag.probes._procfs import list_pids, read_text
from vllmdiag.probes.host import shm_usage

SPEC = ProbeSpec(name="shm", layer="queue", description="/dev/shm segments, sizes, ages and mappers",
                 requires=("processes",), timeout_s=3.0)

_MAPS_LINE = re.compile(r"^[0-9a-f]+-[0-9a-f]+ (\S{4}) [0-9a-f]+ ([0-9a-f]+):([0-9a-f]+) (\d+)\s+(.*)$")
MAX_ENTRIES = 4096


def classify_name(name: str) -> str:
    if re.fullmatch(r"psm_[0-9a-f]{8}", name):
        return "psm"
    for prefix, kind in (("vllm_mm_", "vllm_mm"), ("vllm_offload_", "vllm_offload"), ("vllm_ec_", "vllm_ec"),
                         ("nccl-", "nccl"), ("sem.", "semaphore")):
        if name.startswith(prefix):
            return kind
    return "other"


def parse_maps(text: str) -> list[dict[str, Any]]:
    """Shared mappings of /dev/shm files in one /proc/<pid>/maps (deduplicated by inode)."""
    seen: dict[tuple[int, int], dict[str, Any]] = {}
    for line in text.splitlines():
        m = _MAPS_LINE.match(line)
        if not m or "/dev/shm/" not in m.group(5):
            continue
        path = m.group(5)
        deleted = path.endswith(" (deleted)")
        dev = os.makedev(int(m.group(2), 16), int(m.group(3), 16))
        key = (dev, int(m.group(4)))
        seen.setdefault(key, {"dev": dev, "inode": key[1], "path": path.removesuffix(" (deleted)"),
                              "deleted": deleted, "perms": m.group(1)})
    return list(seen.values())


def collect(ctx: Context) -> dict[str, Any]:
    procs = ctx.data("processes").get("processes", [])
    own_mnt = _readlink(ctx.proc("self/ns/mnt"))
    roots: dict[str, dict[str, Any]] = {str(ctx.dev_shm): {"dir": str(ctx.dev_shm), "mnt_ns": own_mnt, "pids": []}}
    for p in procs:
        mnt = p.get("ns", {}).get("mnt")
        if mnt and mnt != own_mnt:
            d = str(ctx.proc(p["pid"], "root")) + "/dev/shm"
            roots.setdefault(f"ns:{mnt}", {"dir": d, "mnt_ns": mnt, "pids": []})["pids"].append(p["pid"])
    segments = []
    for key, root in roots.items():
        root["usage"] = shm_usage(root["dir"])
        segments.extend(_list_segments(root["dir"], key))
    mappers, deleted = _mappers(ctx, [p["pid"] for p in procs])
    by_key = {(s["dev"], s["inode"]): s for s in segments}
    unmapped = [s for s in segments if (s["dev"], s["inode"]) not in mappers]
    if unmapped:
        # A segment not mapped by vLLM may still be someone else's live segment (a DataLoader):
        # look at every other process before anyone calls it leaked.
        others = [pid for pid in list_pids(ctx.proc_root) if pid not in {p["pid"] for p in procs}]
        more, _ = _mappers(ctx, others)
        for k, pids in more.items():
            if k in by_key:
                by_key[k]["mapped_by_other"] = pids
    for s in segments:
        s["mapped_by"] = sorted(mappers.get((s["dev"], s["inode"]), []))
        s.setdefault("mapped_by_other", [])
    return {"roots": list(roots.values()), "segments": segments, "deleted_mappings": deleted}


def _list_segments(directory: str, root_key: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    now = time.time()
    try:
        entries = list(os.scandir(directory))[:MAX_ENTRIES]
    except OSError:
        return out
    for entry in entries:
        try:
            st = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not entry.is_file(follow_symlinks=False):
            continue
        out.append({
            "name": entry.name, "path": entry.path, "root": root_key, "kind": classify_name(entry.name),
            "size_bytes": st.st_size, "allocated_bytes": st.st_blocks * 512, "mtime": st.st_mtime,
            "age_s": round(max(0.0, now - st.st_mtime), 1), "inode": st.st_ino, "dev": st.st_dev,
            "uid": st.st_uid,
        })
    return out


def _mappers(ctx: Context, pids: list[int]) -> tuple[dict[tuple[int, int], list[int]], list[dict[str, Any]]]:
    found: dict[tuple[int, int], list[int]] = {}
    deleted = []
    for pid in pids:
        text = read_text(ctx.proc(pid, "maps"), limit=16 << 20)
        for m in parse_maps(text or ""):
            found.setdefault((m["dev"], m["inode"]), []).append(pid)
            if m["deleted"]:
                deleted.append({"pid": pid, "path": m["path"], "inode": m["inode"]})
    return found, deleted


def _readlink(path: os.PathLike[str]) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None
