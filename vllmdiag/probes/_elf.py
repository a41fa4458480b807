"""ELF `.note.gnu.build-id` reader (not a probe: leading underscore).

The build-id tells two builds of a library apart when their version strings match: the same
"libnccl.so.2.21.5" built twice has hung vLLM when ranks loaded different builds (issue #41725).
The parser only needs a reader ``(offset, length) -> bytes``, so it is tested on bytes and real files.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

Reader = Callable[[int, int], bytes]

PT_NOTE = 4
NT_GNU_BUILD_ID = 3
MAX_PHNUM = 256  # real libraries have ~10 program headers; more means a corrupt or hostile file
MAX_NOTE_BYTES = 64 << 10


class ElfError(ValueError):
    pass


def parse_build_id(read: Reader) -> str | None:
    """Hex build-id from the PT_NOTE segments, None when the file has none; ElfError if not ELF."""
    ident = read(0, 16)
    if len(ident) < 16 or ident[:4] != b"\x7fELF":
        raise ElfError("not an ELF file")
    is64 = {1: False, 2: True}.get(ident[4])
    order = {1: "<", 2: ">"}.get(ident[5])
    if is64 is None or order is None:
        raise ElfError("unknown ELF class or byte order")
    header = read(0, 64 if is64 else 52)
    fmt = order + ("16xHHIQQQIHHH" if is64 else "16xHHIIIIIHHH")
    try:
        fields = struct.unpack_from(fmt, header)
    except struct.error:
        raise ElfError("truncated ELF header") from None
    phoff, phentsize, phnum = fields[4], fields[8], fields[9]
    if phnum > MAX_PHNUM or phentsize < (56 if is64 else 32):
        raise ElfError("implausible program header table")
    for i in range(phnum):
        ph = read(phoff + i * phentsize, phentsize)
        p_type, offset, filesz, align = _program_header(ph, order, is64)
        if p_type != PT_NOTE or filesz > MAX_NOTE_BYTES:
            continue
        found = parse_notes(read(offset, filesz), order, align)
        if found is not None:
            return found
    return None


def parse_notes(data: bytes, order: str, align: int = 4) -> str | None:
    """Walk one note segment: namesz, descsz, type, name, desc (each padded to the segment alignment)."""
    pad = 8 if align == 8 else 4  # .note.gnu.property segments are 8-aligned; classic notes 4
    pos = 0
    while pos + 12 <= len(data):
        namesz, descsz, n_type = struct.unpack_from(order + "III", data, pos)
        name_at = pos + 12
        desc_at = name_at + _round(namesz, pad)
        end = desc_at + _round(descsz, pad)
        if end > len(data) + pad:  # a size running off the segment: stop, never guess
            return None
        if n_type == NT_GNU_BUILD_ID and data[name_at:name_at + namesz].rstrip(b"\0") == b"GNU":
            return data[desc_at:desc_at + descsz].hex() or None
        pos = end
    return None


def build_id_of(path: Path) -> str | None:
    """Build-id of a file on disk (pread only; the file is never mapped or written)."""
    with open(path, "rb") as fh:
        def read(offset: int, length: int) -> bytes:
            fh.seek(offset)
            return fh.read(length)

        return parse_build_id(read)


def _program_header(ph: bytes, order: str, is64: bool) -> tuple[int, int, int, int]:
    try:
        if is64:
            p_type, _flags, offset, _va, _pa, filesz, _memsz, align = struct.unpack_from(order + "IIQQQQQQ", ph)
        else:
            p_type, offset, _va, _pa, filesz, _memsz, _flags, align = struct.unpack_from(order + "IIIIIIII", ph)
    except struct.error:
        raise ElfError("truncated program header") from None
    return p_type, offset, filesz, align


def _round(n: int, to: int) -> int:
    return (n + to - 1) // to * to
