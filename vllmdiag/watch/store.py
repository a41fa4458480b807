"""The watcher's output directory: one snapshot + one report per stall, with rotation.

Only files whose names match the watcher's own pattern are ever counted or removed, so pointing
``--out`` at a directory that holds other files never loses them. Oldest events go first.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllmdiag.outfile import OutputError, write_output

PREFIX = "vllmdiag-watch-"
# vllmdiag-watch-20261130T170501123Z-0007-node_1234.json  (time, sequence, deployment)
NAME = re.compile(r"^vllmdiag-watch-(\d{8}T\d{9}Z-\d{4})-[A-Za-z0-9._-]{1,80}\.(json|html|md)$")
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Saved:
    snapshot: Path
    report: Path | None
    error: str | None = None


class Store:
    def __init__(self, out_dir: Path, keep: int, max_bytes: int, report_suffix: str = ".html") -> None:
        self.out_dir, self.keep, self.max_bytes, self.report_suffix = out_dir, keep, max_bytes, report_suffix
        self._seq = 0

    def prepare(self) -> None:
        self.out_dir.mkdir(parents=True, exist_ok=True, mode=0o750)
        if not os.access(self.out_dir, os.W_OK | os.X_OK):
            raise PermissionError(f"--out {self.out_dir}: not writable")

    def save(self, deployment_id: str, snapshot: dict[str, Any], report: Any) -> Saved:
        """Write the snapshot JSON (what `vllmdiag analyze` reads) and the report, then rotate."""
        self._seq = (self._seq + 1) % 10000
        now = dt.datetime.now(dt.timezone.utc)
        stem = f"{PREFIX}{now.strftime('%Y%m%dT%H%M%S')}{now.microsecond // 1000:03d}Z-{self._seq:04d}-{safe(deployment_id)}"
        snap_path = self.out_dir / f"{stem}.json"
        # Through the one output writer (atomic: temp file with O_EXCL, then rename; never through a symlink).
        write_output(snap_path, json.dumps(snapshot, separators=(",", ":"), default=str) + "\n", "--out")
        report_path: Path | None = self.out_dir / f"{stem}{self.report_suffix}"
        error = None
        try:
            from vllmdiag.render.files import report_text

            write_output(report_path, report_text(report, report_path), "--out")  # type: ignore[arg-type]
        except (OSError, ValueError, OutputError) as exc:  # the snapshot is the contract: `analyze` can redo a report
            report_path, error = None, f"report not written: {exc}"
        self.rotate(protect={snap_path.name} | ({report_path.name} if report_path else set()))
        return Saved(snap_path, report_path, error)

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
                    path.unlink()
                except FileNotFoundError:
                    pass
                removed.append(path)
                total -= size
        return removed

    def events(self) -> list[tuple[str, list[tuple[Path, int]]]]:
        """Our files grouped by event (time + sequence), oldest first; regular files only."""
        grouped: dict[str, list[tuple[Path, int]]] = {}
        try:
            entries = list(os.scandir(self.out_dir))
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
                grouped.setdefault(m.group(1), []).append((Path(entry.path), st.st_size))
        return sorted(grouped.items())


def safe(text: str) -> str:
    """A file-name-safe form of a deployment id (node names come from the target: untrusted)."""
    return _UNSAFE.sub("_", text).strip("._")[:80] or "deployment"

