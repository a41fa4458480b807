"""vLLM 0.33 `ShmRingBuffer` byte layout and chunk format (vllm-internals.md 1.2-1.5).

Pure functions over bytes, written from the reference facts so the simulator's rings can be
checked against real fixtures. The diagnostic probes deliberately do not import this module:
a bug shared by the writer and the reader would hide itself.
"""

from __future__ import annotations

import pickle
import struct
from dataclasses import dataclass
from typing import Any

MiB = 1 << 20
OVERFLOW = 1
# A message goes in-ring only if 6 + 4*n_oob + sum(len) < max_chunk_bytes (1.4): the 6 is the
# 2-byte count plus the main pickle's 4-byte length; the overflow byte is not counted.
HEADER_FIXED_BYTES = 6


@dataclass(frozen=True)
class Geometry:
    n_reader: int
    max_chunk_bytes: int
    max_chunks: int

    @property
    def metadata_size(self) -> int:
        return 1 + self.n_reader

    @property
    def metadata_offset(self) -> int:
        return self.max_chunk_bytes * self.max_chunks

    @property
    def total_bytes(self) -> int:
        return (self.max_chunk_bytes + self.metadata_size) * self.max_chunks

    def chunk_offset(self, idx: int) -> int:
        return idx * self.max_chunk_bytes

    def flags_offset(self, idx: int) -> int:
        return self.metadata_offset + idx * self.metadata_size


# Queue geometries of a 0.33 deployment with default settings (1.10).
def rpc_geometry(local_world_size: int) -> Geometry:
    return Geometry(local_world_size, 16 * MiB, 10)


def response_geometry() -> Geometry:
    return Geometry(1, 24 * MiB, 10)


def tp_broadcaster_geometry(tp_size: int) -> Geometry:
    return Geometry(tp_size - 1, 4 * MiB, 6)


def geometry_from_size(size: int) -> list[Geometry]:
    """Every (C, K, n) solving size = (C + 1 + n) * K with C a whole number of MiB (1.12)."""
    found = []
    for k in range(1, 65):
        if size % k:
            continue
        per = size // k
        n = per % MiB - 1
        if 1 <= n <= 64 and per - (n + 1) > 0:
            found.append(Geometry(n, per - (n + 1), k))
    return found


def slot_flags(buf: bytes | memoryview, geo: Geometry) -> list[tuple[int, list[int]]]:
    """`[(written, [read_0..read_n-1]), ...]` for every slot."""
    out = []
    for i in range(geo.max_chunks):
        off = geo.flags_offset(i)
        raw = bytes(buf[off : off + geo.metadata_size])
        out.append((raw[0], list(raw[1:])))
    return out


def unread_counts(flags: list[tuple[int, list[int]]], n_reader: int) -> list[int]:
    """Per reader: slots published (written=1) that this reader has not read yet."""
    return [sum(1 for w, r in flags if w == 1 and r[i] == 0) for i in range(n_reader)]


def writer_may_write(written: int, reads: list[int]) -> bool:
    return written == 0 or sum(reads) == len(reads)


def reader_may_read(written: int, reads: list[int], reader: int) -> bool:
    return written == 1 and reads[reader] == 0


def encode(obj: Any) -> list[bytes]:
    """Pickle protocol 5; out-of-band buffers become separate frames like vLLM's enqueue."""
    oob: list[pickle.PickleBuffer] = []
    main = pickle.dumps(obj, protocol=5, buffer_callback=oob.append)
    return [main] + [bytes(b.raw()) for b in oob]


def fits_in_ring(frames: list[bytes], max_chunk_bytes: int) -> bool:
    n_oob = len(frames) - 1
    return HEADER_FIXED_BYTES + 4 * n_oob + sum(len(f) for f in frames) < max_chunk_bytes


def chunk_bytes(frames: list[bytes]) -> bytes:
    """In-ring chunk: overflow byte 0, BE u16 count, then (BE u32 length, bytes) per frame."""
    parts = [b"\x00", struct.pack(">H", len(frames))]
    for f in frames:
        parts.append(struct.pack(">I", len(f)))
        parts.append(f)
    return b"".join(parts)


@dataclass(frozen=True)
class ChunkHead:
    overflow: bool
    frame_lengths: list[int]
    main_pickle: bytes

    @property
    def is_pickle5(self) -> bool:
        return self.main_pickle[:2] == b"\x80\x05"


def parse_chunk(chunk: bytes | memoryview) -> ChunkHead:
    if chunk[0] == OVERFLOW:
        return ChunkHead(True, [], b"")
    (count,) = struct.unpack_from(">H", chunk, 1)
    off, lengths = 3, []
    for _ in range(count):
        (n,) = struct.unpack_from(">I", chunk, off)
        lengths.append(n)
        off += 4 + n
    main = bytes(chunk[7 : 7 + lengths[0]]) if lengths else b""
    return ChunkHead(False, lengths, main)


def decode_chunk(chunk: bytes | memoryview) -> Any:
    (count,) = struct.unpack_from(">H", chunk, 1)
    off, frames = 3, []
    for _ in range(count):
        (n,) = struct.unpack_from(">I", chunk, off)
        frames.append(bytes(chunk[off + 4 : off + 4 + n]))
        off += 4 + n
    return pickle.loads(frames[0], buffers=frames[1:])
