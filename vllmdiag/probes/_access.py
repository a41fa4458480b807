"""Reads of /proc that tell "gone" from "not allowed" (issue 15, item 4).

Without root (or as root with its capabilities dropped) /proc/<pid>/fd, maps and environ of another
user's process are unreadable, and an empty answer looks exactly like "no sockets" or "maps nothing".
A probe that could not see must say so: these helpers return DENIED for EACCES/EPERM, so the probe
lists the pids it could not read and returns a Partial whose reason names the fix.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from vllmdiag.probes import _procfs
from vllmdiag.probes._procfs import DENIED, readlink_checked
from vllmdiag.probes._procfs import ProcMiss as _Denied  # the type of DENIED (probes annotate with it)

FIX = ("run as root (or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH), or as the user the deployment runs as")
_DENIED_ERRNOS = (errno.EACCES, errno.EPERM)


def read_proc(path: Path, limit: int = 1 << 20) -> str | None | _Denied:
    """The text, None when the process (or file) is gone or a zombie, DENIED when we may not read it
    (``_procfs.read_proc``: the one reader)."""
    text = _procfs.read_proc(path, limit)
    return text if isinstance(text, str) or text is DENIED else None


def fd_targets(fd_dir: Path) -> list[str] | None | _Denied:
    """readlink of every fd: None when the process is gone, DENIED when the links may not be read.

    As root without CAP_SYS_PTRACE the directory lists but every readlink fails with EACCES; as
    another user the listing itself fails. Both are "denied", never "no fds"."""
    try:
        names = os.listdir(fd_dir)
    except OSError as exc:
        return DENIED if exc.errno in _DENIED_ERRNOS else None
    out: list[str] = []
    denied = 0
    base = os.fspath(fd_dir) + "/"  # plain strings: a TP=8 node has ~1,500 fds, a Path per fd cost ~10 ms
    for name in names:
        target, no_access = readlink_checked(base + name)
        if target is not None:
            out.append(target)
        denied += no_access  # otherwise: the fd was closed meanwhile
    if denied:
        return DENIED
    return out


def blind_reason(what: str, pids: list[int]) -> str:
    shown = ", ".join(str(p) for p in sorted(pids)[:8]) + (f" (+{len(pids) - 8} more)" if len(pids) > 8 else "")
    return f"cannot read {what} of pid(s) {shown} (permission denied): {FIX}"
