"""What `triage` remembers from a `watch` on this node: the watcher's last stall of each deployment.

The watcher rewrites one small JSON file in its own ``--out`` (STATE_NAME, 0640, atomic rename) on
each change of state. `triage` run by hand an hour into a hang reads it first and says when the
stall began, its layer and culprit and where the evidence is, before its own fresh look.

Where: ``$VLLMDIAG_WATCH_DIR`` when set, else the watcher's default ``--out`` (root:
/var/lib/vllmdiag/watch, the unit's StateDirectory; others: $XDG_STATE_HOME/vllmdiag/watch or
~/.local/state/vllmdiag/watch). A watcher run with another ``--out`` is found by setting the variable.

The file is evidence only if it is ours: a regular file (never through a symlink), owned by root or
by this user, in a directory of the same owners, neither writable by others, and small. Anything else
is ignored with one line saying why, never trusted. Standard library only: triage's start is timed.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import stat
from pathlib import Path
from typing import Any, TextIO

STATE_NAME = "vllmdiag-watch.state"  # JSON; not *.json: the evidence files are those
SCHEMA = "vllmdiag-watch-state/1"
MAX_STATE_BYTES = 256 << 10
MAX_DEPLOYMENTS = 64
ENV = "VLLMDIAG_WATCH_DIR"


def default_out_dir() -> Path | None:
    """``watch --out`` when none is given: an absolute path, never one relative to where the watcher
    was started (in a shared directory another user could plant a link there: issue 25 item 6). Root:
    /var/lib/vllmdiag/watch (the unit's StateDirectory); others: $XDG_STATE_HOME/vllmdiag/watch, or
    ~/.local/state/vllmdiag/watch; None when neither is known (then --out is required)."""
    given = os.environ.get(ENV, "")
    if given.startswith("/"):  # where triage looks too: one setting for both (a test, a CI job, a pod's volume)
        return Path(given)
    if os.geteuid() == 0:
        return Path("/var/lib/vllmdiag/watch")
    state = os.environ.get("XDG_STATE_HOME", "")
    if state.startswith("/"):
        return Path(state) / "vllmdiag" / "watch"
    home = os.environ.get("HOME", "")
    return Path(home) / ".local" / "state" / "vllmdiag" / "watch" if home.startswith("/") and home != "/" else None


# ---- the watcher's side ------------------------------------------------------------------------
def state_document(node: str, deps: list[Any], now: float, wall: float) -> dict[str, Any]:
    """The state file's content from the tracker's deployments (vllmdiag.watch.state.Tracked)."""
    out = []
    for t in deps[:MAX_DEPLOYMENTS]:
        verdict = t.verdict or {}
        culprit = (verdict.get("culprits") or [{}])[0] or {}
        out.append({"id": t.deployment_id, "root_pid": t.root_pid, "state": t.state, "stalls": t.stalls,
                    "stalled_at": round(t.stalled_wall, 3) if t.stalls and t.stalled_wall else None,
                    "status": verdict.get("status"), "layer": verdict.get("layer"),
                    "culprit": {"role": culprit.get("role"), "pid": culprit.get("pid"), "rank": culprit.get("rank")},
                    "evidence": t.evidence or None})
    return {"schema": SCHEMA, "node": node, "watcher_pid": os.getpid(), "written_at": round(wall, 3),
            "deployments": out}


# ---- triage's side -----------------------------------------------------------------------------
class Untrusted(Exception):
    """The state file is not ours: one line says why."""


def state_dir() -> Path | None:
    given = os.environ.get(ENV, "")
    return Path(given) if given else default_out_dir()


def say_remembered(stream: TextIO, directory: Path | None = None, wall: float | None = None) -> None:
    """Write triage's first lines (nothing when no watcher state is here); never raises."""
    try:
        lines = remembered(directory, wall)
    except Exception as exc:  # noqa: BLE001 - a memory must never cost the fresh look
        lines = [f"vllmdiag: watch state not read ({type(exc).__name__})"]
    for line in lines:
        stream.write(line + "\n")
    if lines:
        stream.flush()


def remembered(directory: Path | None = None, wall: float | None = None) -> list[str]:
    """One line per deployment the watcher saw stall (or one line why its state file is ignored)."""
    where = directory if directory is not None else state_dir()
    if where is None:
        return []
    path = where / STATE_NAME
    try:
        doc = read_state(where)
    except FileNotFoundError:
        return []  # no watcher here (or it never saw anything)
    except Untrusted as exc:
        return [_clean(f"vllmdiag: ignored the watch state {path}: {exc}")]
    now = wall if wall is not None else dt.datetime.now(dt.timezone.utc).timestamp()
    return [_clean(line) for line in describe(doc, now, path)]


def read_state(directory: Path) -> dict[str, Any]:
    from vllmdiag.files.outfile import OutputError, open_dir

    try:
        pfd = open_dir(str(directory))
    except OutputError as exc:
        raise Untrusted(str(exc)) from None
    except NotADirectoryError:
        raise FileNotFoundError(str(directory)) from None
    try:
        _trusted(os.stat(".", dir_fd=pfd), "its directory")
        try:
            fd = os.open(STATE_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=pfd)
        except OSError as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise Untrusted(f"not a plain file ({exc.strerror or exc})") from None
    finally:
        os.close(pfd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted("not a regular file")
        _trusted(st, "the file")
        if st.st_size > MAX_STATE_BYTES:
            raise Untrusted(f"{st.st_size} bytes, more than the {MAX_STATE_BYTES} a watcher writes")
        data = os.read(fd, MAX_STATE_BYTES + 1)
    finally:
        os.close(fd)
    return _parse(data)


def _trusted(st: os.stat_result, what: str) -> None:
    owners = {0, os.geteuid()}
    if st.st_uid not in owners:
        raise Untrusted(f"{what} is owned by uid {st.st_uid}, not by root or this user")
    mode = stat.S_IMODE(st.st_mode)
    if mode & 0o022:
        raise Untrusted(f"{what} is writable by others (mode {mode:o}): anyone could have written it")


def _parse(data: bytes) -> dict[str, Any]:
    def no_constants(name: str) -> None:
        raise ValueError(f"not JSON: {name}")

    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=no_constants)
    except (ValueError, UnicodeError):
        raise Untrusted("not the watcher's JSON") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("deployments"), list):
        raise Untrusted(f"not a {SCHEMA} document")
    if not _number(doc.get("written_at")):
        raise Untrusted("no time it was written")
    return doc


def describe(doc: dict[str, Any], now: float, path: Path) -> list[str]:
    out = []
    alive = _alive(doc.get("watcher_pid"))
    written = float(doc["written_at"])
    for dep in doc["deployments"][:MAX_DEPLOYMENTS]:
        if not isinstance(dep, dict) or not _number(dep.get("stalled_at")) or not isinstance(dep.get("id"), str):
            continue
        at = float(dep["stalled_at"])
        culprit = dep.get("culprit") if isinstance(dep.get("culprit"), dict) else {}
        who = "-"
        if culprit and culprit.get("pid") is not None:
            who = f"{culprit.get('role') or '?'} pid {culprit.get('pid')} rank {culprit.get('rank')}"
        now_state = dep.get("state")
        tail = {"stalled": "", "gone": "; it has gone since (restarted or stopped)"}.get(
            str(now_state), f"; it was {now_state} at the watcher's last change")
        out.append(f"watch saw deployment {dep['id']} stall at {_stamp(at)} ({max(0.0, now - at):.0f} s ago): "
                   f"{dep.get('status') or '?'}, layer {dep.get('layer') or '-'}, culprit {who}; "
                   f"evidence {dep.get('evidence') or '(not saved)'}{tail}")
    if out:
        state = "running" if alive else "not running now"
        out.append(f"(from {path}, written {_stamp(written)}, the watcher is {state}); triage's own fresh look follows:")
    return out


def _alive(pid: Any) -> bool:
    return isinstance(pid, int) and not isinstance(pid, bool) and pid > 0 and os.path.exists(f"/proc/{pid}")


def _number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x < 1e11


def _stamp(wall: float) -> str:
    return dt.datetime.fromtimestamp(wall, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _clean(text: str) -> str:
    """One printable line: ids and paths in the file came from the target's node name."""
    return "".join(ch if ch.isprintable() else "?" for ch in text)[:1000]
