"""libs probe: ELF build-id parser on real files, and a live process mapping a libnccl-named library."""

from __future__ import annotations

import struct
import sys
from pathlib import Path

import pytest

from vllmdiag.probes._elf import ElfError, build_id_of, parse_notes
from vllmdiag.probes.libs import is_nccl, mapped_files


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
