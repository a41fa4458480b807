"""NVIDIA driver lines (Xid, NVRM, NVLink) from the kernel log, including those from before the hang.

NVML's event API only reports Xids that happen after a listener registered (the ``nvml`` probe
waits 0 ms), so an Xid that caused a hang an hour ago is only in the kernel log. ``/dev/kmsg`` is
opened read-only and non-blocking: every open has its own read position starting at the oldest
record, so reading takes nothing from anyone. Each ``read`` returns one record
(``pri,seq,usec_since_boot,flags;text``); EPIPE means records were overwritten while we read
(skip on). Without permission (``kernel.dmesg_restrict=1`` and no CAP_SYSLOG) it falls back to
``journalctl -k``, bounded, and otherwise skips with the reason.
"""

from __future__ import annotations

import errno
import os
import re
import time
from typing import Any

from vllmdiag.context import Context
from vllmdiag.probe import ProbeSpec, Skip
from vllmdiag.probes._procfs import read_text

SPEC = ProbeSpec(name="kmsg", layer="gpu", description="NVIDIA Xid/NVRM/NVLink lines from the kernel log (read-only)",
                 timeout_s=3.0, deferred=True)
MAX_RECORDS = 200_000  # a full 16 MiB ring of short lines; reading it takes ~0.1 s
MAX_KEPT = 200  # driver lines kept (newest)
MAX_LINE = 400
READ_BUDGET_S = 1.0
_DRIVER = re.compile(r"NVRM|Xid|nvidia|NVLink|nvlink|GPU has fallen off", re.I)
_XID = re.compile(r"Xid \(PCI:([0-9a-fA-F:.]+)\):\s*(\d+)(?:,\s*pid=(\d+|'<unknown>'))?(?:,\s*name=([^,]*))?,?\s*(.*)")


def collect(ctx: Context) -> dict[str, Any]:
    path = str(ctx.options.kmsg_path or "/dev/kmsg")
    try:
        lines, source = _read_kmsg(path), "kmsg"
    except PermissionError as exc:
        lines, source = _journal(ctx, f"{path}: {exc.strerror}"), "journalctl"
    except OSError as exc:
        raise Skip(f"cannot read the kernel log ({path}: {exc.strerror or exc})") from None
    uptime = _uptime(ctx)
    records = [r for r in (parse_record(line, uptime) for line in lines) if r is not None]
    return {"source": source, "uptime_s": uptime, "lines": records[-MAX_KEPT:], "driver_lines": len(records),
            "xids": [r for r in records if r.get("xid") is not None][-MAX_KEPT:]}


def _read_kmsg(path: str) -> list[str]:
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    out: list[str] = []
    pending = b""
    deadline = time.monotonic() + READ_BUDGET_S
    try:
        for _ in range(MAX_RECORDS):
            if time.monotonic() > deadline:
                break
            try:
                chunk = os.read(fd, 8192)
            except BlockingIOError:
                break  # caught up with the newest record
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # the ring overwrote records under us: the next read resyncs
                if exc.errno == errno.EINVAL:
                    break
                raise
            if not chunk:
                break  # a plain file (tests) or an exotic kernel: end of data
            pending += chunk
            *done, pending = pending.split(b"\n")
            out += [d.decode("utf-8", "replace") for d in done if _DRIVER.search(d.decode("utf-8", "replace"))]
    finally:
        os.close(fd)
    return out


def _journal(ctx: Context, why: str) -> list[str]:
    res = ctx.run(["journalctl", "-k", "-o", "short-monotonic", "--no-pager", "-q", "-n", "20000"], 2.0)
    if res.error or res.returncode not in (0, None) or res.timed_out:
        raise Skip(f"kernel log not readable ({why}; journalctl -k: {res.error or res.stderr.strip()[:120] or 'failed'}); "
                   "run as root or grant CAP_SYSLOG (or set kernel.dmesg_restrict=0)")
    return [line for line in res.stdout.splitlines()[:MAX_RECORDS] if _DRIVER.search(line)]


def parse_record(line: str, uptime_s: float | None) -> dict[str, Any] | None:
    """One /dev/kmsg record (``6,1234,5678901,-;text``) or journalctl short-monotonic line
    (``[ 5678.901234] host kernel: text``)."""
    text, at = line, None
    m = re.match(r"(\d+),(\d+),(\d+),[^;]*;(.*)", line)
    if m:
        at, text = int(m.group(3)) / 1e6, m.group(4)
    else:
        j = re.match(r"\[\s*(\d+\.\d+)\]\s+\S+\s+kernel:\s?(.*)", line)
        if j:
            at, text = float(j.group(1)), j.group(2)
    if not _DRIVER.search(text):
        return None
    rec: dict[str, Any] = {"text": text[:MAX_LINE], "at_s": at,
                           "age_s": round(uptime_s - at, 1) if at is not None and uptime_s else None}
    x = _XID.search(text)
    if x:
        rec.update({"xid": int(x.group(2)), "pci": x.group(1).lower(), "pid": int(x.group(3)) if (x.group(3) or "").isdigit()
                    else None, "detail": x.group(5)[:200]})
    return rec


def _uptime(ctx: Context) -> float | None:
    try:
        return float((read_text(ctx.proc("uptime")) or "").split()[0])  # the system's: a miss is no /proc
    except (ValueError, IndexError):
        return None
