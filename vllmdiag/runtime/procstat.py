"""The one parser of ``/proc/<pid>/stat`` (and of a thread's ``task/<tid>/stat``) for the whole tool.

Every reader of a stat file goes through ``parse_stat``, so the comm rule lives in one place: the comm
(field 2) is in parentheses and may itself hold spaces and parens (``a) (b``, a setproctitle name), so
the fields after it start after the *last* ``)``. A line that does not read (cut short, garbled) is
None, never half a record. psutil's one ``_parse_stat_file`` behind every accessor is the model.

Dependency-free (``os`` only, no typing, no pathlib): ``runtime/lastword.py`` reads this process's
start from it on a starved node, where every module loaded costs CPU it has not got (priority.py).
``probes/_procfs.py`` re-exports it for the probes, with the reader that tells denied from gone.
"""

from __future__ import annotations

import os

STAT = "stat"  # the file's name under /proc/<pid>/ and /proc/<pid>/task/<tid>/
MIN_FIELDS = 22  # after the comm: state (field 3) through rss (field 24), on every kernel since 2.6

_FIELDS = ("pid", "comm", "state", "ppid", "pgid", "session", "flags", "utime_ticks", "stime_ticks",
           "num_threads", "starttime_ticks", "vsize_bytes", "rss_pages")


class Stat:
    """The fields of a stat line the tool uses (proc(5) numbering in the comments). A plain class:
    a dataclass or NamedTuple would load ``typing``/``re`` here (see the module doc)."""

    __slots__ = _FIELDS

    def __init__(self, *, pid: int = 0, comm: str = "", state: str = "?", ppid: int = 0, pgid: int = 0,
                 session: int = 0, flags: int = 0, utime_ticks: int = 0, stime_ticks: int = 0, num_threads: int = 0,
                 starttime_ticks: int = 0, vsize_bytes: int = 0, rss_pages: int = 0) -> None:
        self.pid = pid  # (1)
        self.comm = comm  # (2) without its parentheses
        self.state = state  # (3) R S D Z T t X I ...
        self.ppid = ppid  # (4)
        self.pgid = pgid  # (5)
        self.session = session  # (6)
        self.flags = flags  # (9) PF_* (PF_EXITING: being torn down)
        self.utime_ticks = utime_ticks  # (14) clock ticks
        self.stime_ticks = stime_ticks  # (15)
        self.num_threads = num_threads  # (20)
        self.starttime_ticks = starttime_ticks  # (22) clock ticks since boot
        self.vsize_bytes = vsize_bytes  # (23)
        self.rss_pages = rss_pages  # (24)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stat) and all(getattr(self, f) == getattr(other, f) for f in _FIELDS)

    __hash__ = None  # type: ignore[assignment]  # mutable record: equal by value, not hashable

    def __repr__(self) -> str:
        return "Stat(" + ", ".join(f"{f}={getattr(self, f)!r}" for f in _FIELDS) + ")"


def parse_stat(text: str | bytes) -> Stat | None:
    """A stat line's fields, or None when it does not read (no comm, cut short, a field not a number)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    start, end = text.find("("), text.rfind(")")
    if start < 0 or end < start:
        return None
    rest = text[end + 1:].split()
    if len(rest) < MIN_FIELDS:
        return None
    try:
        return Stat(pid=int(text[:start]), comm=text[start + 1:end], state=rest[0], ppid=int(rest[1]),
                    pgid=int(rest[2]), session=int(rest[3]), flags=int(rest[6]), utime_ticks=int(rest[11]),
                    stime_ticks=int(rest[12]), num_threads=int(rest[17]), starttime_ticks=int(rest[19]),
                    vsize_bytes=int(rest[20]), rss_pages=int(rest[21]))
    except ValueError:
        return None


def read_stat(pid_dir: str | os.PathLike[str]) -> Stat | None:
    """The stat of ``pid_dir`` (``/proc/<pid>``, ``/proc/self``, ``<proc>/<pid>/task/<tid>``), or None
    when it is gone, may not be read or does not parse: for callers to whom every miss is "not there"
    (``probes/_procfs.read_stat_checked`` tells denied from gone)."""
    try:
        with open(os.path.join(os.fspath(pid_dir), STAT), "rb") as fh:
            return parse_stat(fh.read(4096))
    except OSError:
        return None
