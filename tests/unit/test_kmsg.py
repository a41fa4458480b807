"""Kernel-log Xids (before the hang too) and NVLink counters as gpu-layer evidence."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vllmdiag.analysis.bisect import analyze
from vllmdiag.context import Context
from vllmdiag.model import ProbeResult, Snapshot
from vllmdiag.probes import kmsg

# Real driver lines (formats from NVIDIA's Xid documentation and field reports), as /dev/kmsg records.
RECORDS = [
    "6,1001,1000000,-;nvidia-nvlink: Nvlink Core is being initialized, major device number 511",
    "4,1002,2000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=4242, name=python3, GPU has fallen off the bus.",
    "4,1003,2500000,-;NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
    "6,1004,3000000,-;eth0: link up",
    "4,1005,4000000,-;NVRM: Xid (PCI:0000:86:00): 13, pid='<unknown>', name=<unknown>, Graphics Exception: ESR 0x1",
]


def test_parse_kmsg_and_journal_lines() -> None:
    rec = kmsg.parse_record(RECORDS[1], uptime_s=62.0)
    assert rec is not None and (rec["xid"], rec["pci"], rec["pid"], rec["age_s"]) == (79, "0000:3b:00", 4242, 60.0)
    assert kmsg.parse_record(RECORDS[3], 10.0) is None
    j = kmsg.parse_record("[ 5678.901234] gpu07 kernel: NVRM: Xid (PCI:0000:86:00): 48, pid=77, DBE", 5700.0)
    assert j is not None and (j["xid"], j["pid"], j["age_s"]) == (48, 77, 21.1)
    assert kmsg.parse_record(RECORDS[4], 10.0)["pid"] is None  # type: ignore[index]


def test_probe_reads_a_kmsg_file_read_only(tmp_path: Path) -> None:
    fake = tmp_path / "kmsg"
    fake.write_text("\n".join(RECORDS) + "\n")
    before = fake.stat().st_mtime_ns
    data = kmsg.collect(Context(options={"kmsg_path": str(fake)}))
    assert data["source"] == "kmsg" and [x["xid"] for x in data["xids"]] == [79, 13]
    assert data["driver_lines"] == 4 and fake.stat().st_mtime_ns == before


def test_probe_on_this_machine_answers_or_says_why() -> None:
    try:
        data = kmsg.collect(Context())
    except kmsg.Skip as skip:
        assert "kernel log" in skip.reason
        return
    assert data["source"] in ("kmsg", "journalctl") and isinstance(data["lines"], list)
    assert len(data["lines"]) <= kmsg.MAX_KEPT


def test_unreadable_kernel_log_is_skipped_with_the_fix(tmp_path: Path) -> None:
    import pytest

    from vllmdiag.probe import Skip

    with pytest.raises(Skip, match="cannot read the kernel log"):
        kmsg.collect(Context(options={"kmsg_path": str(tmp_path / "missing")}))


def _snap(xids: list[dict[str, Any]], nvlink: dict[str, int] | None = None, passes: list[Snapshot] | None = None,
          age: float = 600.0) -> Snapshot:
    procs = [{"pid": 10, "ppid": 1, "pgid": 10, "role": "api_server", "cmdline": ["vllm", "serve", "m"], "ranks": {},
              "state": "S", "title": "vllm serve m", "age_s": age},
             {"pid": 11, "ppid": 10, "pgid": 10, "role": "engine_core", "cmdline": ["VLLM::EngineCore"], "ranks": {},
              "state": "S", "title": "VLLM::EngineCore", "titled": True, "age_s": age}]
    gpus = [{"index": 0, "pci_bus_id": "00000000:3B:00.0", "processes": [{"pid": 11}], "nvlink_errors": nvlink}]
    s = Snapshot("n1", "", "", 0.1, {"processes": ProbeResult("ok", 0, None, {"processes": procs}),
                                     "nvml": ProbeResult("ok", 0, None, {"gpus": gpus}),
                                     "kmsg": ProbeResult("ok", 0, None, {"source": "kmsg", "xids": xids})})
    s.passes = passes or []
    return s


def test_a_hardware_xid_during_the_deployment_is_a_warning_on_it() -> None:
    rep = analyze([_snap([kmsg.parse_record(RECORDS[1], 62.0)])])  # type: ignore[list-item]
    f = next(f for f in rep.findings if f.code == "gpu.kernel_xid")
    assert f.severity == "warning" and f.deployment == "n1:10" and "GPU0" in f.message and "fell off the bus" in f.message
    assert rep.verdict.status == "degraded"


def test_an_old_or_application_xid_is_information() -> None:
    old = analyze([_snap([kmsg.parse_record(RECORDS[1], 5000.0)], age=60)])  # type: ignore[list-item]
    assert [f.severity for f in old.findings if f.code == "gpu.kernel_xid"] == ["info"]
    app = analyze([_snap([kmsg.parse_record(RECORDS[4], 62.0)])])  # type: ignore[list-item]
    assert [f.severity for f in app.findings if f.code == "gpu.kernel_xid"] == ["info"]
    assert app.verdict.status == "healthy" or app.verdict.status == "inconclusive"


def test_nvlink_counters_judged() -> None:
    crc = analyze([_snap([], {"crc_flit": 3, "crc_data": 0, "replay": 0, "recovery": 0})])
    assert [f.severity for f in crc.findings if f.code == "gpu.nvlink_errors"] == ["info"]
    replay = analyze([_snap([], {"crc_flit": 0, "crc_data": 0, "replay": 2, "recovery": 0})])
    assert [f.severity for f in replay.findings if f.code == "gpu.nvlink_errors"] == ["warning"]
    later = _snap([], {"crc_flit": 9, "crc_data": 0, "replay": 0, "recovery": 0})
    grow = analyze([_snap([], {"crc_flit": 3, "crc_data": 0, "replay": 0, "recovery": 0}, passes=[later])])
    f = next(f for f in grow.findings if f.code == "gpu.nvlink_errors")
    assert f.severity == "warning" and f.evidence["grew"] == ["crc_flit"]
    clean = analyze([_snap([], {"crc_flit": 0, "crc_data": 0, "replay": 0, "recovery": 0})])
    assert not [f for f in clean.findings if f.code == "gpu.nvlink_errors"]


def test_kmsg_is_opened_read_only_and_non_blocking(tmp_path: Path, monkeypatch: Any) -> None:
    seen: list[int] = []
    real = os.open

    def spy(path: Any, flags: int, *a: Any) -> int:
        seen.append(flags)
        return real(path, flags, *a)

    fake = tmp_path / "kmsg"
    fake.write_text(RECORDS[1] + "\n")
    monkeypatch.setattr(kmsg.os, "open", spy)
    kmsg.collect(Context(options={"kmsg_path": str(fake)}))
    assert seen and all(f & (os.O_WRONLY | os.O_RDWR) == 0 and f & os.O_NONBLOCK for f in seen)
