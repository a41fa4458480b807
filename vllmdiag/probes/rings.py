"""vLLM shared-memory rings (`psm_*`): geometry, per-reader unread slots, sampled over the triage.

Reads only the metadata region and a few chunk heads with `os.pread` on an O_RDONLY fd: never
`multiprocessing.shared_memory` (its resource tracker can unlink a live segment, 1.12), never
mmap, never a write. Flags are sampled every ~100 ms until the other probes finish, so the
"sampled over time" facts cost no extra wall time. Roles and verdicts are left to analysis.
"""

from __future__ import annotations

import os
import time
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import Partial, ProbeSpec, Skip
from vllmdiag.probes import _ringfmt as rf
from vllmdiag.probes._access import FIX

SPEC = ProbeSpec(name="rings", layer="queue", description="vLLM shm ring flags, sampled while the other probes run",
                 requires=("processes", "shm"), timeout_s=30.0, sampler=True)
INTERVAL_S = 0.1
MARGIN_S = 0.3  # stop sampling this long before the deadline so the result is never lost to a timeout
MAX_SEGMENTS = 256
MAX_KEPT_SAMPLES = 64


class _Ring:
    """One open segment being sampled; aggregates stay exact even when old samples are dropped."""

    def __init__(self, seg: dict[str, Any], fd: int, decision: rf.Decision, t0: float) -> None:
        assert decision.geometry is not None
        self.seg, self.fd, self.geo, self.decision, self.t0 = seg, fd, decision.geometry, decision, t0
        self.samples: list[dict[str, Any]] = []
        self.unreads: list[list[int]] = []
        self.first = self.last = decision.slots
        self.count, self.moved, self.full_all, self.vanished = 0, False, True, False

    def sample(self, slots: rf.Slots | None = None) -> None:
        if slots is None:
            off, length = self.geo.metadata_offset, self.geo.metadata_bytes
            raw = _pread(self.fd, length, off)
            slots = rf.parse_slots(raw, self.geo) if raw is not None else None
            if slots is None:  # truncated or rewritten under us: keep what was stable so far
                self.vanished = True
                return
        unread = rf.unread_per_reader(slots, self.geo.n_reader)
        self.moved |= slots != self.last
        self.full_all &= max(unread, default=0) == self.geo.max_chunks
        entry: dict[str, Any] = {"t_s": round(time.monotonic() - self.t0, 3), "written": sum(s[0] for s in slots),
                                 "unread": unread}
        if not self.samples or slots != self.last:
            entry["flags"] = rf.flags_text(slots)  # only when changed: a long --rates stays small
        if len(self.samples) < MAX_KEPT_SAMPLES:
            self.samples.append(entry)
        self.unreads.append(unread)
        self.last, self.count = slots, self.count + 1

    def result(self) -> dict[str, Any]:
        n, k = self.geo.n_reader, self.geo.max_chunks
        stable = rf.stable(self.unreads)
        window = round(self.samples[-1]["t_s"] - self.samples[0]["t_s"], 3) if self.samples else 0.0
        writer = rf.writer_index(self.last, n)
        out = {key: self.seg.get(key) for key in ("name", "path", "root", "inode", "size_bytes", "allocated_bytes",
                                                   "mtime", "age_s", "mapped_by", "mapped_by_other")}
        out.update(geometry=self.geo.to_dict(), format=self.decision.fmt, score=self.decision.score,
                   reason=self.decision.reason, candidates=self.decision.candidates, samples=self.samples,
                   sample_count=self.count, window_s=window,
                   unread_slots=self.unreads[-1] if self.unreads else [], stable_unread=stable,
                   written=sum(s[0] for s in self.last), full=self.full_all and self.count > 0,
                   blocked_on=[r for r in range(n) if stable[r] == k], writer_index=writer,
                   filling=rf.filling_slots(self.last), moved=self.moved, vanished=self.vanished,
                   unlinked=not _still_linked(str(self.seg.get("path")), self.fd))
        out.update(self._peek(writer))
        return out

    def _peek(self, writer: int | None) -> dict[str, Any]:
        """Method/status of the newest written chunk; if the newest is unknown, what all written chunks agree on."""
        k = self.geo.max_chunks
        idx = [(writer - 1) % k] if writer is not None else [i for i, s in enumerate(self.last) if s[0] == 1]
        seen = [rf.scan_chunk(_pread(self.fd, rf.SCAN_BYTES, self.geo.chunk_offset(i)) or b"", self.decision.fmt)
                for i in idx if self.last[i][0] == 1]
        agreed = {key: (seen[0][key] if seen and all(s[key] == seen[0][key] for s in seen) else None)
                  for key in ("method", "status", "overflow")}
        return {"last_method": agreed["method"], "last_status": agreed["status"], "last_overflow": agreed["overflow"]}


def collect(ctx: Context) -> dict[str, Any] | Partial:
    shm = ctx.result("shm")
    if shm is None or shm.status not in ("ok", "partial"):
        raise Skip("the shm probe did not list /dev/shm, so there is no segment to decode")
    t0 = time.monotonic()
    # Segments vLLM maps first, then those other processes map, then the unmapped (leftovers, junk):
    # never directory order, so a flood of psm_* files cannot hide the live rings (issue 15, item 5).
    segments = sorted((s for s in shm.data.get("segments", []) if s.get("kind") == "psm"),
                      key=lambda s: (not s.get("mapped_by"), not s.get("mapped_by_other")))
    left = segments[MAX_SEGMENTS:]
    skipped = {"count": len(left), "mapped_by_vllm": sum(1 for s in left if s.get("mapped_by")),
               "reason": f"more than {MAX_SEGMENTS} psm_* segments; those mapped by vLLM processes were decoded first"
               } if left else {}
    rings: list[_Ring] = []
    rejected: list[dict[str, Any]] = []
    try:
        for seg in segments[:MAX_SEGMENTS]:
            ring = _open(seg, t0, rejected)
            if ring is not None:
                rings.append(ring)
        if rings:
            _sample_until_others_done(ctx, rings, t0)
        data = {"rings": [r.result() for r in rings], "rejected": rejected,
                "skipped_segments": len(left), "skipped": skipped, "interval_s": INTERVAL_S}
        # A ring a vLLM process maps that we may not open is not "no ring": its mappers were not seen.
        denied = [r for r in rejected if r.get("denied")]
        blind = sorted({int(p) for r in denied for p in r.get("mapped_by") or [] if isinstance(p, int)})
        if denied:
            data["unreadable_pids"] = blind
            return Partial(data, f"cannot open {len(denied)} segment(s) read-only (permission denied), "
                           f"mapped by pid(s) {', '.join(map(str, blind[:8])) or 'none'}: {FIX}")
        return data
    finally:
        for r in rings:
            os.close(r.fd)


def _open(seg: dict[str, Any], t0: float, rejected: list[dict[str, Any]]) -> _Ring | None:
    def reject(reason: str) -> None:
        rejected.append({"name": seg.get("name"), "path": seg.get("path"), "size_bytes": seg.get("size_bytes"),
                         "mapped_by": seg.get("mapped_by", []), "reason": reason})

    if not rf.solve_size(int(seg.get("size_bytes") or 0)):
        reject(f"size {seg.get('size_bytes')} fits no ring geometry")  # no need to open it
        return None
    try:
        fd = _open_ro(str(seg["path"]))
    except OSError as exc:
        reject(f"cannot open read-only: {exc.strerror}" + (" (run as root)" if isinstance(exc, PermissionError) else ""))
        rejected[-1]["denied"] = isinstance(exc, PermissionError)
        return None
    st = os.fstat(fd)
    if seg.get("inode") not in (None, st.st_ino):
        os.close(fd)
        reject("replaced since the shm probe listed it")
        return None
    off, length = rf.tail_span(st.st_size)
    tail = _pread(fd, length, off) or b""
    heads = {o: _pread(fd, rf.HEAD_BYTES, o) or b"" for o in rf.plan_heads(st.st_size, tail)}
    mappers = len(seg.get("mapped_by") or []) + len(seg.get("mapped_by_other") or [])
    decision = rf.decide(st.st_size, tail, heads, mappers or None)
    if decision.geometry is None:
        os.close(fd)
        reject(decision.reason)
        return None
    ring = _Ring(seg, fd, decision, t0)
    ring.sample(decision.slots)  # the first sample is the tail just decoded
    return ring


def _sample_until_others_done(ctx: Context, rings: list[_Ring], t0: float) -> None:
    stop_by = min(t0 + SPEC.timeout_s - 1.0, ctx.deadline - MARGIN_S)
    keep_until = t0 + max(INTERVAL_S, float(ctx.options.rates_s or 0.0))
    last, taken = time.monotonic(), 1
    while not ctx.cancelled:
        done = ctx.wait_others(max(0.0, last + INTERVAL_S - time.monotonic()))
        now = time.monotonic()
        if done and taken >= 2 and now >= keep_until:
            return
        if now < last + INTERVAL_S:  # others finished early: still space the samples >= 100 ms apart
            time.sleep(max(0.0, min(last + INTERVAL_S, stop_by) - now))
        if time.monotonic() >= stop_by:
            return
        last, taken = time.monotonic(), taken + 1
        for r in rings:
            if not r.vanished:
                r.sample()


def _still_linked(path: str, fd: int) -> bool:
    """False once the name is gone or names another file: a ring unlinked while we sampled it
    was being torn down, not leaked."""
    try:
        st, own = os.stat(path, follow_symlinks=False), os.fstat(fd)
    except OSError:
        return False
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _open_ro(path: str) -> int:
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK
    try:
        # O_NOATIME: do not even touch the access time of a segment we only look at.
        return os.open(path, flags | os.O_NOATIME)
    except PermissionError:
        return os.open(path, flags)


def _pread(fd: int, length: int, offset: int) -> bytes | None:
    try:
        data = os.pread(fd, length, offset)
    except OSError:
        return None
    return data if len(data) == length else None
