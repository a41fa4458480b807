"""The one way vllmdiag writes an output file (--save, --report, --junit, --prom, collect --out).

The tool runs as root on every node, so an output path is untrusted: `--junit /dev/null` must not
turn /dev/null into a regular file, and a symlink planted at `/tmp/report.md` must not make root
write through it onto another file (issue 15, item 3). So:
- a new or existing regular file is replaced atomically (a temp file made with O_EXCL in the same
  directory, then rename: the directory entry is replaced, never written through);
- a character device or FIFO (or `-`, /dev/stdout, /dev/stderr, /dev/fd/N) is written as a stream,
  non-blocking and bounded in time (a FIFO nobody reads must not hang the tool);
- a directory, a block device, a socket, or a symlink to anything but a stream is refused;
- the directories above it are walked one component at a time from / (or the working directory)
  with O_NOFOLLOW, and a symlink on the way is followed only when root or we own it: in a shared
  world-writable directory, another user's link to a root-only directory once made root create
  files inside it (issue 25 item 6). The file is then made with openat in the directory so opened.
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

    fix = "write to a path in a directory you own that others cannot write (not /proc, /sys or a device)"


MAX_LINKS = 40  # as the kernel's ELOOP limit


def write_output(path: Path | str, text: str, option: str = "output", mode: int | None = None) -> None:
    """Write `text` to `path` as described in the module docstring; raise OutputError on any failure.
    ``mode``: of a new file (default 0666 less the umask); an existing file keeps its own."""
    name = str(path)
    data = text.encode("utf-8")
    try:
        fd_no = _own_fd(name)
        if fd_no is not None:
            _flush_std()
            _write_stream_fd(fd_no, data)
            return
        _write_path(name, data, mode)
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


def open_dir(path: str, *, create: int | None = None) -> int:
    """An O_PATH descriptor of directory ``path``, reached without following a symlink that neither
    root nor we own (at any level); ``create``: mode of missing components, made as we go (mkdir -p).
    Raises OutputError (refused), FileNotFoundError, NotADirectoryError or another OSError."""
    euid = os.geteuid()
    fd = os.open("/" if path.startswith("/") else ".", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    todo = [c for c in path.split("/") if c not in ("", ".")]
    links = 0
    shown = "/" if path.startswith("/") else ""
    try:
        while todo:
            comp = todo.pop(0)
            try:
                st = os.stat(comp, dir_fd=fd, follow_symlinks=False)
            except FileNotFoundError:
                if create is None:
                    raise
                os.mkdir(comp, create, dir_fd=fd)
                st = os.stat(comp, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                if st.st_uid not in (0, euid):
                    raise OutputError(f"{shown}{comp} is a symlink owned by uid {st.st_uid}; refusing to follow "
                                      "another user's link (name the real directory)")
                links += 1
                if links > MAX_LINKS:
                    raise OutputError(f"{shown}{comp}: too many levels of symlinks")
                target = os.readlink(comp, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                todo[:0] = [c for c in target.split("/") if c not in ("", ".")]
                continue
            nfd = os.open(comp, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nfd
            shown += comp + "/"
        return fd
    except BaseException:
        os.close(fd)
        raise


def _write_path(name: str, data: bytes, mode: int | None = None) -> None:
    if not name:
        raise OutputError("empty file name")
    directory, base = os.path.split(name)
    if not base or base in (".", ".."):
        raise OutputError("is a directory; name a file")
    dfd = open_dir(directory or ".")
    try:
        write_at(dfd, base, data, mode, shown=name)
    finally:
        os.close(dfd)


def write_at(dfd: int, base: str, data: bytes, mode: int | None = None, *, shown: str = "") -> None:
    """Write file ``base`` of the directory open as ``dfd`` (see ``open_dir``), by the rules above."""
    try:
        st = os.stat(base, dir_fd=dfd, follow_symlinks=False)
    except FileNotFoundError:
        _replace_regular(dfd, base, data, None, mode)
        return
    kind = st.st_mode
    if stat.S_ISLNK(kind):
        _through_link(f"/proc/self/fd/{dfd}/{base}", data, shown or base)
    elif stat.S_ISDIR(kind):
        raise OutputError("is a directory; name a file")
    elif stat.S_ISREG(kind):
        _replace_regular(dfd, base, data, st, mode)
    elif stat.S_ISCHR(kind) or stat.S_ISFIFO(kind):
        _write_stream_path(base, data, follow=False, dir_fd=dfd)
    else:
        raise OutputError("is not a regular file, a character device or a FIFO; refusing to write")


def _through_link(name: str, data: bytes, shown: str) -> None:
    """A symlink is followed only onto a stream (/dev/tty, a FIFO); never onto a file or directory."""
    try:
        target = os.stat(name)
    except OSError:
        raise OutputError("is a dangling symlink; refusing to write through it") from None
    if stat.S_ISCHR(target.st_mode) or stat.S_ISFIFO(target.st_mode):
        _write_stream_path(name, data, follow=True)
        return
    raise OutputError(f"is a symlink to {os.path.realpath(name)}; refusing to write through it (name the file itself)")


def _replace_regular(dfd: int, base: str, data: bytes, old: os.stat_result | None, mode: int | None) -> None:
    """Temp file (O_EXCL|O_NOFOLLOW, mode 0600) in the same directory, then rename over the entry.

    rename replaces the directory entry, so a hard link or a file swapped in meanwhile is never
    written through; readers (node_exporter) never see a half-written file."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = f".{base[:100]}.{os.urandom(6).hex()}.tmp"
        try:
            fd = os.open(tmp, flags, 0o600, dir_fd=dfd)
            break
        except FileExistsError:
            continue
    else:
        raise OutputError("could not create a temporary file beside it")
    try:
        _write_all(fd, data)
        if old is not None:
            os.fchmod(fd, stat.S_IMODE(old.st_mode))
        elif mode is not None:
            os.fchmod(fd, mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            os.fchmod(fd, 0o666 & ~umask)
        os.close(fd)
        fd = -1
        os.replace(tmp, base, src_dir_fd=dfd, dst_dir_fd=dfd)
    except BaseException:
        if fd >= 0:
            os.close(fd)
        try:
            os.unlink(tmp, dir_fd=dfd)
        except OSError:
            pass
        raise


def _write_stream_path(name: str, data: bytes, follow: bool, dir_fd: int | None = None) -> None:
    """Open a device/FIFO without creating, truncating or blocking; write within STREAM_TIMEOUT_S."""
    flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC | (0 if follow else os.O_NOFOLLOW)
    try:
        fd = os.open(name, flags, dir_fd=dir_fd)
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
