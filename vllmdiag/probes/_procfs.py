"""Small readers of /proc files shared by several probes (not a probe: leading underscore).

One reader, ``read_proc``, tells the three ways a read can miss apart, in psutil's vocabulary (not its
dependency): GONE (NoSuchProcess: the pid or file vanished, a normal /proc race), DENIED (AccessDenied:
another user's process without the capabilities: a blind spot the probe must report) and ZOMBIE
(ZombieProcess: the pid is there but dead, its files empty). ``read_text`` is the same read for callers
to whom every miss means "nothing here" (None); ``_access.read_proc`` the same for gone-vs-denied.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from vllmdiag.redact import REDACTED, redact_argv, redact_env
from vllmdiag.runtime.procstat import STAT, Stat, parse_stat, read_stat

# Redaction lives in vllmdiag/redact.py (shared with the fleet), the stat parser in runtime/procstat.py
# (dependency-free: the last word reads it before the CLI loads); both re-exported for the probes.
__all__ = ["REDACTED", "Stat", "parse_stat", "read_stat", "redact_argv", "redact_env"]


class ProcMiss:
    """Why a /proc read returned no text: ``GONE``, ``DENIED`` or ``ZOMBIE`` (compare with ``is``)."""

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return self.why.upper()


GONE, DENIED, ZOMBIE = ProcMiss("gone"), ProcMiss("denied"), ProcMiss("zombie")
_DENIED_ERRNOS = (errno.EACCES, errno.EPERM)


def read_proc(path: Path, limit: int = 1 << 20) -> str | ProcMiss:
    """The file's text, or why there is none (GONE, DENIED, ZOMBIE). An empty per-process file (environ,
    cmdline) of a zombie is ZOMBIE, not an empty answer."""
    try:
        with open(path, "rb") as fh:
            text = fh.read(limit).decode("utf-8", "replace")
    except OSError as exc:
        if exc.errno in _DENIED_ERRNOS:
            return DENIED
        return ZOMBIE if _zombie(path) else GONE
    return ZOMBIE if not text and _zombie(path) else text


def _zombie(path: Path) -> bool:
    """Whether ``path`` lies under /proc/<pid>/ of a zombie (its stat says Z)."""
    for parent in Path(path).parents:
        if parent.name.isdigit():
            stat = read_stat(parent)
            return stat is not None and stat.state == "Z"
    return False


def read_stat_checked(pid_dir: Path) -> Stat | ProcMiss:
    """``read_stat`` for callers that must tell a hidden process (DENIED: /proc mounted hidepid) from
    one that is gone; a line that does not parse is GONE (a process caught mid-exit)."""
    text = read_proc(pid_dir / STAT)
    if isinstance(text, ProcMiss):
        return text
    return parse_stat(text) or GONE


def read_text(path: Path, limit: int = 1 << 20) -> str | None:
    """``read_proc`` for callers to whom gone, denied and zombie all mean "nothing here"."""
    text = read_proc(path, limit)
    return text if isinstance(text, str) else None


def read_cmdline(proc_pid: Path) -> list[str] | None:
    raw = read_text(proc_pid / "cmdline")
    if raw is None:
        return None
    parts = raw.split("\0")
    while parts and parts[-1] == "":
        parts.pop()
    if len(parts) == 1 and " " in parts[0]:
        # A setproctitle title is one string (no NULs between words, padded with NULs or spaces):
        # split it on spaces the way psutil does (psutil #1179, #1304).
        parts = [w for w in parts[0].split(" ") if w]
    return parts


def boot_time(proc_root: Path) -> float:
    """The system's boot time (``btime`` of /proc/stat, the system's file, not a process's: readable by
    anyone, so a miss means no /proc at all: 0)."""
    for line in (read_text(proc_root / STAT) or "").splitlines():
        if line.startswith("btime "):
            return float(line.split()[1])
    return 0.0


def list_pids(proc_root: Path) -> list[int]:
    try:
        return sorted(int(name) for name in os.listdir(proc_root) if name.isdigit())
    except OSError:
        return []


def parse_environ(raw: str, keep: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in raw.split("\0"):
        key, sep, value = item.partition("=")
        if sep and key.startswith(keep):
            out[key] = value
    return redact_env(out)


# --- readlink: one place owns /proc's link quirks (psutil's _pslinux.readlink does the same) ---
DELETED_SUFFIX = " (deleted)"


def readlink(path: os.PathLike[str] | str) -> str | None:
    """The link's target, or None when the pid/fd is gone or may not be read (use ``readlink_checked``
    to tell those apart). The kernel may hand back a NUL and garbage after it (psutil #717): cut there.
    A ``" (deleted)"`` suffix is kept: ``split_deleted`` says what it means for a file."""
    try:
        return os.readlink(path).split("\0", 1)[0]
    except OSError:
        return None


def readlink_checked(path: os.PathLike[str] | str) -> tuple[str | None, bool]:
    """(target, denied): (None, False) when the pid or fd is gone (normal /proc races), (None, True)
    when we may not look (another user's process without CAP_SYS_PTRACE): a blind spot to report."""
    try:
        return os.readlink(path).split("\0", 1)[0], False
    except OSError as exc:
        return None, exc.errno in _DENIED_ERRNOS


def split_deleted(target: str) -> tuple[str, bool]:
    """(path, deleted) of a maps/fd target: the kernel appends " (deleted)" to an unlinked file's path."""
    if target.endswith(DELETED_SUFFIX):
        return target[: -len(DELETED_SUFFIX)], True
    return target, False
