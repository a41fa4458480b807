"""Which libnccl build each vLLM process has mapped (path + ELF build-id), package versions, and the
vLLM install (site-packages, distributions, vllm/_version.py) each process runs from (_vllm_install).

Same NCCL version string with a different build on two nodes has hung vLLM (issue #41725), so a
fleet gate compares the build-id, not the name. Only /proc/<pid>/maps and pread of the library
through /proc/<pid>/root are used (containerised workers see their own filesystem).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec
from vllmdiag.probes import _vllm_install
from vllmdiag.probes._access import blind_reason
from vllmdiag.probes._elf import ElfError, build_id_of
from vllmdiag.probes._procfs import DENIED, read_proc, split_deleted

SPEC = ProbeSpec(name="libs", layer="host", description="libnccl path + ELF build-id per vLLM process, package versions",
                 requires=("processes",), timeout_s=3.0, deferred=True)

_NCCL = re.compile(r"^libnccl[\w.-]*\.so(\.[\d.]+)?$")
_SITE = re.compile(r"^(.*/(?:site|dist)-packages)/([^/]+)/")
_VERSION_IN_NAME = re.compile(r"\.so\.(\d+\.\d+\.\d+)$")
# top-level package directory -> dist-info name patterns that carry its version
_DIST = {"vllm": ("vllm-",), "torch": ("torch-",), "nvidia": ("nvidia_nccl_cu",)}


def mapped_files(maps_text: str) -> list[str]:
    """Distinct file paths of a /proc/<pid>/maps (field 6), in order of first appearance."""
    seen: dict[str, None] = {}
    for line in maps_text.splitlines():
        parts = line.split(None, 5)
        if len(parts) == 6 and parts[5].startswith("/"):
            seen.setdefault(split_deleted(parts[5])[0], None)
    return list(seen)


def is_nccl(path: str) -> bool:
    return bool(_NCCL.match(os.path.basename(path)))


def collect(ctx: Context) -> dict[str, Any] | Partial:
    procs = [p for p in ctx.data("processes").get("processes", []) if p.get("role")]
    libraries: dict[tuple[str, str | None], dict[str, Any]] = {}
    packages: dict[str, str] = {}
    per_pid: dict[str, list[str]] = {}
    installs: dict[tuple[str, str | None], dict[str, Any]] = {}
    denied: list[int] = []
    for proc in procs:
        pid = proc["pid"]
        maps = read_proc(ctx.proc(pid, "maps"), limit=16 << 20)
        if maps is DENIED:  # "no libnccl mapped" would be a guess: say whose maps we could not read
            denied.append(pid)
        files = mapped_files(maps if isinstance(maps, str) else "")
        root = ctx.proc(pid, "root")
        found = _vllm_install.site_of(files, [str(a) for a in proc.get("cmdline") or []], root)
        if found:
            key = (found[0], proc.get("ns", {}).get("mnt"))
            if key not in installs:
                installs[key] = {"site": found[0], "found_by": found[1], "mnt_ns": key[1], "pids": [],
                                 **_vllm_install.describe(root, found[0])}
            installs[key]["pids"].append(pid)
        for path in files:
            if not is_nccl(path):
                continue
            per_pid.setdefault(str(pid), []).append(path)
            key = (path, proc.get("ns", {}).get("mnt"))
            if key not in libraries:
                libraries[key] = describe_library(root, path)
            libraries[key]["pids"].append(pid)
        for name, version in package_versions(root, files).items():
            packages.setdefault(name, version)
    data = {"nccl": list(libraries.values()), "nccl_by_pid": per_pid, "packages": packages,
            "vllm_installs": list(installs.values())}
    if denied:
        return Partial({**data, "unreadable_pids": denied}, blind_reason("/proc/<pid>/maps", denied))
    return data


def describe_library(root: Path, path: str) -> dict[str, Any]:
    where = root / path.lstrip("/")
    out: dict[str, Any] = {"path": path, "build_id": None, "size_bytes": None, "version": _version_from_name(path),
                           "pids": [], "error": None}
    try:
        out["size_bytes"] = where.stat().st_size
        out["build_id"] = build_id_of(where)
    except (OSError, ElfError) as exc:
        out["error"] = str(exc)
    if out["version"] is None:
        out["version"] = package_versions(root, [path]).get("nccl")
    return out


def package_versions(root: Path, files: list[str]) -> dict[str, str]:
    """vllm/torch/nccl versions from the dist-info next to the mapped package (pip installs only)."""
    found: dict[str, str] = {}
    sites = {(m.group(1), m.group(2)) for m in map(_SITE.match, files) if m and m.group(2) in _DIST}
    for site, top in sorted(sites):
        for prefix in _DIST[top]:
            version = _dist_version(root / site.lstrip("/"), prefix)
            if version:
                found["nccl" if top == "nvidia" else top] = version
    return found


def _dist_version(site: Path, prefix: str) -> str | None:
    try:
        names = sorted(os.listdir(site))
    except OSError:
        return None
    for name in names:
        if name.startswith(prefix) and name.endswith(".dist-info"):
            return name[:-len(".dist-info")].rsplit("-", 1)[-1]
    return None


def _version_from_name(path: str) -> str | None:
    m = _VERSION_IN_NAME.search(path)
    return m.group(1) if m else None
