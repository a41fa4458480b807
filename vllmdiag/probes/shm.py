"""/dev/shm entries (psm_*, vllm_*, nccl-*): size, allocated bytes, age, and who maps each one.

Only stat() and /proc/<pid>/maps are read: never open a segment through multiprocessing's
SharedMemory, whose resource tracker can unlink a live segment (vllm-internals 1.12).
Segments of containerised processes are reached through /proc/<pid>/root/dev/shm.
"""

from __future__ import annotations

import os
import re
import stat
import time
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec
from vllmdiag.probes._access import DENIED, _Denied, blind_reason, read_proc
from vllmdiag.probes._procfs import list_pids, split_deleted
from vllmdiag.probes._procfs import readlink as _readlink
from vllmdiag.probes.host import shm_usage
from vllmdiag.vocab.shm_names import classify_name

SPEC = ProbeSpec(name="shm", layer="queue", description="/dev/shm segments, sizes, ages and mappers",
                 requires=("processes",), timeout_s=3.0)

_MAPS_LINE = re.compile(r"^[0-9a-f]+-[0-9a-f]+ (\S{4}) [0-9a-f]+ ([0-9a-f]+):([0-9a-f]+) (\d+)\s+(.*)$")
MAX_ENTRIES = 4096  # entries stat'ed per /dev/shm root besides those vLLM maps
MAX_SCAN = 200_000  # directory entries counted at most (a bounded walk, even of a flooded /dev/shm)


def parse_maps(text: str) -> list[dict[str, Any]]:
    """Shared mappings of /dev/shm files in one /proc/<pid>/maps (deduplicated by inode)."""
    seen: dict[tuple[int, int], dict[str, Any]] = {}
    for line in text.splitlines():
        if "/dev/shm/" not in line:  # a torch process maps ~10k lines; match only the few that count
            continue
        m = _MAPS_LINE.match(line)
        if not m or "/dev/shm/" not in m.group(5):
            continue
        path, deleted = split_deleted(m.group(5))
        dev = os.makedev(int(m.group(2), 16), int(m.group(3), 16))
        key = (dev, int(m.group(4)))
        seen.setdefault(key, {"dev": dev, "inode": key[1], "path": path,
                              "deleted": deleted, "perms": m.group(1)})
    return list(seen.values())


def collect(ctx: Context) -> dict[str, Any] | Partial:
    procs = ctx.data("processes").get("processes", [])
    own_mnt = _readlink(ctx.proc("self/ns/mnt"))
    roots: dict[str, dict[str, Any]] = {str(ctx.dev_shm): {"dir": str(ctx.dev_shm), "mnt_ns": own_mnt, "pids": []}}
    root_of: dict[int, str] = {}
    for p in procs:
        mnt = p.get("ns", {}).get("mnt")
        key = str(ctx.dev_shm)
        if mnt and mnt != own_mnt:
            key = f"ns:{mnt}"
            d = str(ctx.proc(p["pid"], "root")) + "/dev/shm"
            roots.setdefault(key, {"dir": d, "mnt_ns": mnt, "pids": []})["pids"].append(p["pid"])
        root_of[p["pid"]] = key
    # Who maps what comes first: the segments vLLM maps are examined whatever else fills the
    # directory (300 junk psm_* files once hid the real rings behind a directory-order cap, issue 15).
    maps = _read_maps(ctx, [p["pid"] for p in procs])
    mappers = _by_key(maps)
    wanted: dict[str, set[str]] = {}
    for pid, found in maps.items():
        for m in found if isinstance(found, list) else []:
            wanted.setdefault(root_of.get(pid, str(ctx.dev_shm)), set()).add(os.path.basename(m["path"]))
    segments, skipped = [], []
    for key, root in roots.items():
        root["usage"] = shm_usage(root["dir"])
        segs, skip = list_segments(root["dir"], key, wanted.get(key, set()))
        segments.extend(segs)
        if skip:
            skipped.append({"dir": root["dir"], **skip})
    by_key = {(s["dev"], s["inode"]): s for s in segments}
    others_blind = 0
    # The watcher's cheap pass leaves leak questions (every other process's maps) to triage.
    if any((s["dev"], s["inode"]) not in mappers for s in segments) and not ctx.options.cheap:
        # A segment not mapped by vLLM may still be someone else's live segment (a DataLoader):
        # look at every other process before anyone calls it leaked.
        mine = {p["pid"] for p in procs}
        more = _read_maps(ctx, [pid for pid in list_pids(ctx.proc_root) if pid not in mine])
        # pid 1 (init, a container's tini or process api) never maps a vLLM segment, and inside
        # containers it is often unreadable even to root: it does not make the leak check blind.
        others_blind = sum(1 for pid, v in more.items() if v is DENIED and pid != 1)
        for k, pids in _by_key(more).items():
            if k in by_key:
                by_key[k]["mapped_by_other"] = pids
    for s in segments:
        s["mapped_by"] = sorted(mappers.get((s["dev"], s["inode"]), []))
        s.setdefault("mapped_by_other", [])
    blind = sorted(pid for pid, v in maps.items() if v is DENIED)
    data = {"roots": list(roots.values()), "segments": segments, "skipped": skipped,
            "deleted_mappings": [{"pid": pid, "path": m["path"], "inode": m["inode"]}
                                 for pid, found in maps.items() for m in (found if isinstance(found, list) else [])
                                 if m["deleted"]],
            "unreadable_pids": blind, "unreadable_other_pids": others_blind}
    if blind:
        return Partial(data, blind_reason("/proc/<pid>/maps", blind))
    return data


def list_segments(directory: str, root_key: str, wanted: set[str]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The wanted (mapped) names first, then at most MAX_ENTRIES others; what was left is counted."""
    out: list[dict[str, Any]] = []
    now = time.time()
    for name in sorted(wanted):
        seg = _segment(os.path.join(directory, name), name, root_key, now)
        if seg is not None:
            out.append(seg)
    left = 0
    try:
        with os.scandir(directory) as it:
            for n, entry in enumerate(it):
                if n >= MAX_SCAN:
                    left += 1  # stop counting exactly: "more than"
                    break
                if entry.name in wanted:
                    continue
                if len(out) >= MAX_ENTRIES + len(wanted):
                    left += 1
                    continue
                seg = _segment(entry.path, entry.name, root_key, now)
                if seg is not None:
                    out.append(seg)
    except OSError:
        pass
    skip = {"count": left, "reason": f"more than {MAX_ENTRIES} entries not mapped by vLLM; every segment a vLLM "
            "process maps was examined"} if left else {}
    return out, skip


def _segment(path: str, name: str, root_key: str, now: float) -> dict[str, Any] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    return {"name": name, "path": path, "root": root_key, "kind": classify_name(name),
            "size_bytes": st.st_size, "allocated_bytes": st.st_blocks * 512, "mtime": st.st_mtime,
            "age_s": round(max(0.0, now - st.st_mtime), 1), "inode": st.st_ino, "dev": st.st_dev, "uid": st.st_uid}


def _read_maps(ctx: Context, pids: list[int]) -> dict[int, list[dict[str, Any]] | _Denied | None]:
    """pid -> its /dev/shm mappings; DENIED when its maps may not be read; None when it is gone."""
    out: dict[int, list[dict[str, Any]] | _Denied | None] = {}
    for pid in pids:
        text = read_proc(ctx.proc(pid, "maps"), limit=16 << 20)
        out[pid] = parse_maps(text) if isinstance(text, str) else text
    return out


def _by_key(maps: dict[int, list[dict[str, Any]] | _Denied | None]) -> dict[tuple[int, int], list[int]]:
    found: dict[tuple[int, int], list[int]] = {}
    for pid, mappings in maps.items():
        for m in mappings if isinstance(mappings, list) else []:
            found.setdefault((m["dev"], m["inode"]), []).append(pid)
    return found


