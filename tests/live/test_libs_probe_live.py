"""The live tests of tests/unit/test_libs_probe.py, which says what they check: these start something."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vllmdiag.context import Context
from vllmdiag.probes._elf import build_id_of
from vllmdiag.runtime.runner import collect_snapshot

LIBC = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")


def _readelf_build_id(path: Path) -> str | None:
    if shutil.which("readelf") is None:
        return None
    out = subprocess.run(["readelf", "-n", str(path)], capture_output=True, text=True, timeout=10).stdout
    for line in out.splitlines():
        if "Build ID:" in line:
            return line.split("Build ID:")[1].strip()
    return None


@pytest.mark.skipif(not LIBC.exists(), reason="needs glibc at the Debian path")
def test_build_id_of_real_libc_matches_readelf() -> None:
    got = build_id_of(LIBC)
    assert got is not None and len(got) == 40
    expected = _readelf_build_id(LIBC)
    if expected is not None:
        assert got == expected


@pytest.mark.skipif(not LIBC.exists(), reason="needs glibc at the Debian path")
def test_live_worker_mapping_a_libnccl_is_reported_with_its_build_id(tmp_path: Path) -> None:
    lib = tmp_path / "libnccl.so.2.99.1"
    shutil.copyfile(LIBC, lib)  # a real ELF with a real build-id, under an NCCL name
    code = textwrap.dedent(f"""
        import mmap, sys, setproctitle
        setproctitle.setproctitle("GATETEST::Worker_TP0")
        fh = open({str(lib)!r}, "rb")
        m = mmap.mmap(fh.fileno(), 0, prot=mmap.PROT_READ)
        print("ready", flush=True)
        sys.stdin.read()
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(0.05)
        snap = collect_snapshot(Context(title_prefix="GATETEST"), probes=["libs"], budget_s=5)
        data = snap.data("libs")
        assert snap.status("libs") == "ok"
        libs = [x for x in data["nccl"] if x["path"] == str(lib)]
        assert libs and libs[0]["pids"] == [child.pid]
        assert libs[0]["build_id"] == build_id_of(LIBC)
        assert libs[0]["version"] == "2.99.1"
        assert data["nccl_by_pid"][str(child.pid)] == [str(lib)]
    finally:
        child.kill()
        child.wait(5)
