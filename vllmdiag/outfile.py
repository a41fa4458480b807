"""The one way vllmdiag writes an output file (--save, --report, --junit, --prom, collect --out).

The tool runs as root on every node, so an output path is untrusted: `--junit /dev/null` must not
turn /dev/null into a regular file, and a symlink planted at `/tmp/report.md` must not make root
write through it onto another file (issue 15, item 3). So:
- a new or existing regular file is replaced atomically (a temp file made with O_EXCL in the same
  directory, then rename: the directory entry is replaced, never written through);
- a character device or FIFO (or `-`, /dev/stdout, /dev/stderr, /dev/fd/N) is written as a stream,
  non-blocking and bounded in time (a FIFO nobody reads must not hang the tool);
- a directory, a block device, a socket, or a symlink to anything but a stream is refused.
Every failure is an OutputError (a BadInput: one line, exit 2). Imports only the standard library:
`collect` (which runs on every node of a sweep) uses it.
"""

from __future__ import annotations

import errno
import os
import re
import select
import stat
import sys
import tempfile
import time
from pathlib import Path

from vllmdiag.errors import BadInput

STREAM_TIMEOUT_S = 10.0
# Paths that name one of our own open descriptors: write to that descriptor, never reopen the file
# behind it (reopening a redirected stdout would write at offset 0 over what we already printed).
_OWN_FD = re.compile(r"^/(?:dev/fd|proc/self/fd)/(\d+)$")
_STD = {"-": 1, "/dev/stdout": 1, "/dev/stderr": 2}


class OutputError(BadInput):
    """An output file could not be written: one line, exit 2."""


def write_output(path: Path | str, text: str, option: str = "output") -> None:
    """Write `text` to `path` as described in the module docstring; raise OutputError on any failure."""
    name = str(path)
    data = text.encode("utf-8")
    try:
        fd_no = _own_fd(name)
        if fd_no is not None:
            _flush_std()
            _write_stream_fd(fd_no, data)
            return
        _write_path(name, data)
    except OutputError as exc:
        raise OutputError(f"{option} {name}: {exc}") from None
    except OSError as exc:
        raise OutputError(f"{option} {name}: cannot write: {exc.strerror or exc}") from None
    except (ValueError, UnicodeError) as exc:  # an embedded NUL, an unencodable name: bad input, not a crash
        raise OutputError(f"{option} {name!r}: not a usable file name ({exc})") from None


def _own_fd(name: str) -> int | None:
    if name in _STD:
        return _STD[name]
    m = _OWN_FD.match(name)
    return int(m.group(1)) if m else None


def _flush_std() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _write_path(name: str, data: bytes) -> None:
    if not name:
        raise OutputError("empty file name")
    try:
        st = os.lstat(name)
    except FileNotFoundError:
        _replace_regular(name, data, None)
        return
    mode = st.st_mode
    if stat.S_ISLNK(mode):
        _through_link(name, data)
    elif stat.S_ISDIR(mode):
        raise OutputError("is a directory; name a file")
    elif stat.S_ISREG(mode):
        _replace_regular(name, data, st)
    elif stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        _write_stream_path(name, data, follow=False)
    else:
        raise OutputError("is not a regular file, a character device or a FIFO; refusing to write")


def _through_link(name: str, data: bytes) -> None:
    """A symlink is followed only onto a stream (/dev/tty, a FIFO); never onto a file or directory."""
    try:
        target = os.stat(name)
    except OSError:
        raise OutputError("is a dangling symlink; refusing to write through it") from None
    if stat.S_ISCHR(target.st_mode) or stat.S_ISFIFO(target.st_mode):
        _write_stream_path(name, data, follow=True)
        return
    raise OutputError(f"is a symlink to {os.path.realpath(name)}; refusing to write through it (name the file itself)")


def _replace_regular(name: str, data: bytes, old: os.stat_result | None) -> None:
    """Temp file (O_EXCL|O_NOFOLLOW via mkstemp) in the same directory, then rename over the entry.

    rename replaces the directory entry, so a hard link or a file swapped in meanwhile is never
    written through; readers (node_exporter) never see a half-written file."""
    directory = os.path.dirname(name) or "."
    base = os.path.basename(name)
    fd, tmp = tempfile.mkstemp(prefix=f".{base[:100]}.", suffix=".tmp", dir=directory)
    try:
        _write_all(fd, data)
        if old is not None:
            os.fchmod(fd, stat.S_IMODE(old.st_mode))
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
        os.close(fd)
        fd = -1
        os.replace(tmp, name)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _write_stream_path(name: str, data: bytes, follow: bool) -> None:
    """Open a device/FIFO without creating, truncating or blocking; write within STREAM_TIMEOUT_S."""
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(name, flags)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise OutputError("is a FIFO with no reader; refusing to wait for one") from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):  # swapped since lstat: never write into it
            raise OutputError("changed while it was opened; refusing to write")
        deadline = time.monotonic() + STREAM_TIMEOUT_S
        view = memoryview(data)
        while view:
            try:
                n = os.write(fd, view[:65536])
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise OutputError(f"reader did not take the output within {STREAM_TIMEOUT_S:.0f} s") from None
                select.select([], [fd], [], min(left, 0.5))
                continue
            view = view[n:]
    finally:
        os.close(fd)


def _write_stream_fd(fd: int, data: bytes) -> None:
    """Our own stdout/stderr/fd N: written as it is (its blocking mode belongs to whoever gave it to us)."""
    try:
        os.fstat(fd)
    except OSError:
        raise OutputError("is not an open descriptor") from None
    _write_all(fd, data)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
