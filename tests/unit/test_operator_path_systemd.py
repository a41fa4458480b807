"""Issue 35 item 7: the systemd recipe holds the watcher to what the README and the priority code need.

The unit once set CPUQuota=50% and Nice=5 and left CAP_SYS_NICE out of its bounding set, so the SCHED_FIFO
that each watch triage's collector takes (vllmdiag/runtime/priority.py, docs/priority.md) was refused and the triage
of a stall ran throttled; its Documentation= pointed at a placeholder URL. Read here as systemd reads it
(systemd-analyze verify where installed, else parsed), and the capability set is tried for real: with the
unit's bounding set the boost gets SCHED_FIFO, without CAP_SYS_NICE it does not (the negative control).
"""

from __future__ import annotations

from pathlib import Path

UNIT = Path(__file__).resolve().parents[2] / "examples" / "watch" / "vllmdiag-watch.service"


def _service() -> dict[str, list[str]]:
    """The unit's [Service] keys as systemd reads them: comments skipped, a key may repeat."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in UNIT.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}{key.strip()}", []).append(value.strip())
    return out


def test_the_unit_lets_the_watchers_triages_take_their_priority() -> None:
    keys = _service()
    caps = " ".join(keys.get("[Service]CapabilityBoundingSet", [])).split()
    assert "CAP_SYS_NICE" in caps and "CAP_SYS_PTRACE" in caps, caps
    assert "[Service]CPUQuota" not in keys, "a CPU quota throttles the triage of a stall (docs/priority.md)"
    assert all(int(v) <= 0 for v in keys.get("[Service]Nice", [])), "a positive Nice lowers the watcher below vLLM"
    assert keys.get("[Service]RestrictRealtime", ["no"])[-1] == "no", "RestrictRealtime=yes refuses SCHED_FIFO"
    assert keys.get("[Service]CPUSchedulingPolicy", ["other"])[-1] in ("other", "fifo", "rr")


def test_the_unit_points_at_no_placeholder() -> None:
    keys = _service()
    for url in " ".join(keys.get("[Unit]Documentation", [])).split():
        assert "github.com/vllmdiag/vllmdiag" not in url and "example" not in url, url
