"""libs probe: ELF build-id parser on real files, and a live process mapping a libnccl-named library."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from vllmdiag.context import Context
from vllmdiag.probes._elf import ElfError, build_id_of, parse_notes
from vllmdiag.probes.libs import is_nccl, mapped_files
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


def test_build_id_of_python_binary_and_non_elf(tmp_path: Path) -> None:
    exe = Path(sys.executable).resolve()
    bid = build_id_of(exe)
    assert bid is None or all(c in "0123456789abcdef" for c in bid)
    text = tmp_path / "x.txt"
    text.write_text("not elf")
    with pytest.raises(ElfError):
        build_id_of(text)


def test_parse_notes_skips_other_notes_and_stops_on_overrun() -> None:
    other = struct.pack("<III", 4, 4, 1) + b"GNU\0" + b"abcd"
    build = struct.pack("<III", 4, 3, 3) + b"GNU\0" + b"\x01\x02\x03\0"
    assert parse_notes(other + build, "<") == "010203"
    assert parse_notes(struct.pack("<III", 4, 1 << 20, 3) + b"GNU\0", "<") is None


def test_mapped_files_and_nccl_names() -> None:
    maps = ("7f00-7f10 r-xp 00000000 08:01 42 /opt/nccl/lib/libnccl.so.2.21.5\n"
            "7f10-7f20 r--p 00000000 08:01 42 /opt/nccl/lib/libnccl.so.2.21.5\n"
            "7f20-7f30 rw-s 00000000 00:1a 7 /dev/shm/psm_deadbeef (deleted)\n"
            "7f30-7f40 rw-p 00000000 00:00 0 [heap]\n")
    assert mapped_files(maps) == ["/opt/nccl/lib/libnccl.so.2.21.5", "/dev/shm/psm_deadbeef"]
    assert is_nccl("/x/libnccl.so.2") and is_nccl("/x/libnccl-net.so") and not is_nccl("/x/libncclx.txt")


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
