"""The watcher's output directory: one snapshot + one report per stall, with rotation.

Only files whose names match the watcher's own pattern are ever counted or removed, so pointing
``--out`` at a directory that holds other files never loses them. Oldest events go first.

The directory is evidence (stacks, command lines, the kept environment) and the watcher runs as root
(issue 25 item 6): it is reached without following another user's symlink at any level
(vllmdiag.files.outfile.open_dir), must be ours, is made 0750 when it holds nothing but our files (a
hostPath DirectoryOrCreate is 0755) and refused while others may write it; files are 0640, written,
listed and removed through the one descriptor opened then, so a link swapped in later is never
followed, by rotation either.
"""

from __future__ import annotations

import datetime as dt
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllmdiag.files.outfile import OutputError, open_dir, write_at
from vllmdiag.model import strict_json
from vllmdiag.watch.history import STATE_NAME  # the watcher's memory for `triage`

PREFIX = "vllmdiag-watch-"
# vllmdiag-watch-20261130T170501123Z-0007-node_1234.json  (time, sequence, deployment)
NAME = re.compile(r"^vllmdiag-watch-(\d{8}T\d{9}Z-\d{4})-[A-Za-z0-9._-]{1,80}\.(json|html|md)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
FILE_MODE = 0o640
DIR_MODE = 0o750


@dataclass(frozen=True)
class Saved:
    snapshot: Path
    report: Path | None
    error: str | None = None


class Store:
    def __init__(self, out_dir: Path, keep: int, max_bytes: int, report_suffix: str = ".html") -> None:
        self.out_dir, self.keep, self.max_bytes, self.report_suffix = out_dir, keep, max_bytes, report_suffix
        self._seq = 0
        self._dfd = -1  # the directory, opened once by prepare()

    def prepare(self) -> None:
        """Open (and make) the directory as described above; OutputError (one line, exit 2) otherwise."""
        if self._dfd >= 0:
            return
        where = f"--out {self.out_dir}"
        try:
            pfd = open_dir(str(self.out_dir), create=DIR_MODE)
            try:
                dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=pfd)
            finally:
                os.close(pfd)
        except OutputError as exc:
            raise OutputError(f"{where}: {exc}") from None
        except NotADirectoryError:
            raise OutputError(f"{where}: not a directory (name a directory for the snapshots of stalls)") from None
        except OSError as exc:
            raise OutputError(f"{where}: not a usable directory: {exc.strerror or exc}") from None
        try:
            self._trust(dfd, where)
        except BaseException:
            os.close(dfd)
            raise
        self._dfd = dfd

    def _trust(self, dfd: int, where: str) -> None:
        st = os.fstat(dfd)
        if st.st_uid != os.geteuid():
            raise OutputError(f"{where}: owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}); another "
                              "user's directory could read or swap the evidence: use one of our own")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o027:
            if not self._only_ours(dfd):
                if mode & 0o022:
                    raise OutputError(f"{where}: writable by others (mode {mode:o}) and holds other files; "
                                      f"chmod go-w it or choose another directory")
            else:
                os.fchmod(dfd, mode & ~0o027)  # empty, or only our own files: made private
        probe = f".vllmdiag-watch-probe-{os.getpid()}"
        try:
            os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                             dir_fd=dfd))
            os.unlink(probe, dir_fd=dfd)
        except OSError as exc:  # /sys, /proc, a read-only mount
            raise OutputError(f"{where}: not writable ({exc.strerror or exc})") from None

    @staticmethod
    def _only_ours(dfd: int) -> bool:
        try:
            return all(NAME.match(e.name) or e.name == STATE_NAME for e in os.scandir(dfd))
        except OSError:
            return False

    def close(self) -> None:
        if self._dfd >= 0:
            os.close(self._dfd)
            self._dfd = -1

    def save(self, deployment_id: str, snapshot: dict[str, Any], report: Any) -> Saved:
        """Write the snapshot JSON (what `vllmdiag analyze` reads) and the report, then rotate."""
        self._seq = (self._seq + 1) % 10000
        now = dt.datetime.now(dt.timezone.utc)
        stem = f"{PREFIX}{now.strftime('%Y%m%dT%H%M%S')}{now.microsecond // 1000:03d}Z-{self._seq:04d}-{safe(deployment_id)}"
        snap_path = self.out_dir / f"{stem}.json"
        self.prepare()
        # Through the one output writer (atomic: temp file with O_EXCL, then rename; never through a symlink).
        # Strict JSON: a NaN from a hostile /metrics must not make the contract unreadable (issue 25 item 7).
        text = strict_json.dumps(snapshot, separators=(",", ":"), default=str) + "\n"
        write_at(self._dfd, snap_path.name, text.encode(), FILE_MODE, shown=str(snap_path))
        self._sync(snap_path.name)
        report_path: Path | None = self.out_dir / f"{stem}{self.report_suffix}"
        error = None
        try:
            from vllmdiag.render.files import report_text

            body = report_text(report, report_path).encode()  # type: ignore[arg-type]
            write_at(self._dfd, report_path.name, body, FILE_MODE, shown=str(report_path))  # type: ignore[union-attr]
            self._sync(report_path.name)  # type: ignore[union-attr]
        except (OSError, ValueError, OutputError) as exc:  # the snapshot is the contract: `analyze` can redo a report
            report_path, error = None, f"report not written: {exc}"
        self.rotate(protect={snap_path.name} | ({report_path.name} if report_path else set()))
        return Saved(snap_path, report_path, error)

    def _sync(self, name: str) -> None:
        """fsync the file and the directory: /livez fails (and the kubelet restarts the pod) only once
        the evidence would survive it, a power cut included."""
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=self._dfd)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.fsync(self._dfd)

    def write_state(self, doc: dict[str, Any]) -> None:
        """The state file `triage` reads (one small JSON, 0640, atomic)."""
        self.prepare()
        text = strict_json.dumps(doc, separators=(",", ":"), default=str) + "\n"
        write_at(self._dfd, STATE_NAME, text.encode(), FILE_MODE, shown=str(self.out_dir / STATE_NAME))

    def rotate(self, protect: frozenset[str] | set[str] = frozenset()) -> list[Path]:
        """Remove the oldest events until at most ``keep`` remain and they fit in ``max_bytes``."""
        events = self.events()
        removed: list[Path] = []
        total = sum(size for _, files in events for _, size in files)
        while events and (len(events) > self.keep or total > self.max_bytes):
            key, files = events[0]
            if any(p.name in protect for p, _ in files):
                break  # never remove what was just written, even if it alone exceeds --max-bytes
            events.pop(0)
            for path, size in files:
                try:
                    os.unlink(path.name, dir_fd=self._dfd)  # an entry of our directory: never through a link
                except FileNotFoundError:
                    pass
                removed.append(path)
                total -= size
        return removed

    def events(self) -> list[tuple[str, list[tuple[Path, int]]]]:
        """Our files grouped by event (time + sequence), oldest first; regular files only."""
        grouped: dict[str, list[tuple[Path, int]]] = {}
        if self._dfd < 0:
            return []
        try:
            entries = list(os.scandir(self._dfd))
        except OSError:
            return []
        for entry in entries:
            m = NAME.match(entry.name)
            if not m:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                grouped.setdefault(m.group(1), []).append((self.out_dir / entry.name, st.st_size))
        return sorted(grouped.items())


def safe(text: str) -> str:
    """A file-name-safe form of a deployment id (node names come from the target: untrusted)."""
    return _UNSAFE.sub("_", text).strip("._")[:80] or "deployment"

