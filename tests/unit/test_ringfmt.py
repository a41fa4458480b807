"""The pure ring decoder on real vLLM 0.33.0 segments, a pre-0.12 segment built from the reference,
and segments that are not vLLM rings (which must be rejected with a reason, never decoded)."""

from __future__ import annotations

import gzip
import json
import pickle
import random
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from vllmdiag.probes import _ringfmt as rf

MiB = rf.MiB
RINGS = Path(__file__).parent.parent / "data" / "rings"
REAL = Path(__file__).parents[3] / "shared" / "data" / "vllm-0.33.0"
Reader = Callable[[int, int], bytes]


def fixture(name: str) -> tuple[int, Reader]:
    """A real segment from its compact form (non-zero byte runs; the rest of the file is zero)."""
    d = json.loads((RINGS / f"{name}.json").read_text())
    extents = [(off, bytes.fromhex(hx)) for off, hx in d["extents"]]
    return d["size_bytes"], sparse_reader(extents)


def sparse_reader(extents: list[tuple[int, bytes]]) -> Reader:
    def read(off: int, n: int) -> bytes:
        out = bytearray(n)
        for start, data in extents:
            lo, hi = max(off, start), min(off + n, start + len(data))
            if lo < hi:
                out[lo - off:hi - off] = data[lo - start:hi - start]
        return bytes(out)

    return read


def decode(size: int, read: Reader, mappers: int | None = None) -> rf.Decision:
    """Exactly the probe's read plan: the tail once, then the chunk heads the decoder asks for."""
    off, length = rf.tail_span(size)
    tail = read(off, length)
    heads = {o: read(o, rf.HEAD_BYTES) for o in rf.plan_heads(size, tail)}
    return rf.decide(size, tail, heads, mappers)


@pytest.mark.parametrize(("name", "geometry", "unread", "writer", "method", "status"), [
    ("rpc-tp4-reader2-stuck", (10, 16 * MiB, 4), [0, 0, 10, 0], None, "execute_model", None),
    ("response-3-unread", (10, 24 * MiB, 1), [3], 3, None, "SUCCESS"),
    ("tp-broadcaster-3readers-2read", (6, 4 * MiB, 3), [0, 0, 0], 2, None, None),
])
def test_real_fixtures_decode_exactly(name, geometry, unread, writer, method, status) -> None:
    size, read = fixture(name)
    desc = json.loads((RINGS / f"{name}.json").read_text())["description"]
    dec = decode(size, read)
    assert dec.geometry == rf.Geometry(*geometry)
    assert (desc["max_chunks"], desc["max_chunk_bytes"], desc["n_reader"]) == geometry
    assert dec.fmt == "new"
    assert rf.unread_per_reader(dec.slots, geometry[2]) == unread
    assert rf.writer_index(dec.slots, geometry[2]) == writer
    assert rf.filling_slots(dec.slots) == []
    newest = (writer - 1) % geometry[0] if writer is not None else 0
    peek = rf.scan_chunk(read(newest * geometry[1], rf.SCAN_BYTES), dec.fmt)
    assert (peek["method"], peek["status"], peek["overflow"]) == (method, status, False)


def test_rpc_fixture_is_full_on_reader_2_and_ambiguity_resolved_by_priors() -> None:
    size, read = fixture("rpc-tp4-reader2-stuck")
    dec = decode(size, read)
    assert max(rf.unread_per_reader(dec.slots, 4)) == dec.geometry.max_chunks  # type: ignore[union-attr]
    assert rf.flags_text(dec.slots) == " ".join(["11101"] * 10)
    # The same size also solves as 32 MiB x 5 with 9 readers (1.12 step 2): ranked lower.
    assert {(c["max_chunks"], c["n_reader"]) for c in dec.candidates} >= {(10, 4), (5, 9)}
    assert dec.candidates[0]["max_chunks"] == 10


@pytest.mark.skipif(not REAL.is_dir(), reason="shared real fixtures not mounted")
def test_compact_fixtures_equal_the_real_segments() -> None:
    for name in ("tp-broadcaster-3readers-2read", "rpc-tp4-reader2-stuck"):
        size, read = fixture(name)
        block, off = 1 << 20, 0
        with gzip.open(REAL / f"{name}.segment.gz") as f:
            while chunk := f.read(block):
                if chunk.count(0) != len(chunk):
                    assert read(off, len(chunk)) == chunk
                else:
                    assert not read(off, len(chunk)).strip(b"\0")
                off += len(chunk)
        assert off == size


def old_format_segment(n_reader: int = 2, written: int = 4, read_by: tuple[int, ...] = (0,)) -> tuple[int, Reader]:
    """A pre-0.12 (PR #26961) ring built byte by byte: 10 MiB x 10, byte 0 = overflow flag,
    the raw pickle from byte 1 (no count, no length)."""
    geo = rf.Geometry(10, 10 * MiB, n_reader)
    size = (geo.max_chunk_bytes + 1 + n_reader) * geo.max_chunks
    extents = []
    meta = bytearray(geo.metadata_bytes)
    for i in range(written):
        payload = pickle.dumps(("execute_model", (i,), {}, 0), protocol=5)
        extents.append((geo.chunk_offset(i), b"\x00" + payload))
        meta[i * (1 + n_reader)] = 1
        for r in read_by:
            meta[i * (1 + n_reader) + 1 + r] = 1
    extents.append((geo.metadata_offset, bytes(meta)))
    return size, sparse_reader(extents)


def test_old_format_segment_decodes() -> None:
    size, read = old_format_segment()
    dec = decode(size, read, mappers=3)
    assert dec.geometry == rf.Geometry(10, 10 * MiB, 2)
    assert dec.fmt == "old"
    assert rf.unread_per_reader(dec.slots, 2) == [0, 4]
    assert rf.writer_index(dec.slots, 2) == 4
    assert rf.scan_chunk(read(3 * 10 * MiB, rf.SCAN_BYTES), "old")["method"] == "execute_model"


def test_overflow_chunk_and_slot_being_filled() -> None:
    geo = rf.Geometry(6, 4 * MiB, 3)
    size = (geo.max_chunk_bytes + 4) * 6
    meta = bytearray(b"\x01\x01\x01\x01" * 2 + b"\x00\x01\x01\x01" + bytes(12))  # slot 2: writer filling it
    main = pickle.dumps({"x": 1}, protocol=5)
    new_chunk = b"\x00\x00\x01" + len(main).to_bytes(4, "big") + main
    read = sparse_reader([(0, new_chunk), (geo.chunk_offset(1), b"\x01stale"), (geo.metadata_offset, bytes(meta))])
    dec = decode(size, read)
    assert dec.geometry == geo and dec.fmt == "new"
    assert rf.filling_slots(dec.slots) == [2]
    assert rf.writer_index(dec.slots, 3) == 2
    assert rf.scan_chunk(read(geo.chunk_offset(1), 64), "new")["overflow"] is True


def test_fresh_zeroed_ring_decodes_by_size_and_priors() -> None:
    size = (16 * MiB + 5) * 10
    dec = decode(size, sparse_reader([]), mappers=5)
    assert dec.geometry == rf.Geometry(10, 16 * MiB, 4) and dec.fmt == "unknown"
    assert rf.writer_index(dec.slots, 4) == 0


def test_non_vllm_segments_are_rejected_with_a_reason() -> None:
    rng = random.Random(4)
    # torch-DataLoader-like: a batch of float32 images in a psm_ segment.
    dl_size = 8 * 3 * 224 * 224 * 4
    floats = bytes(rng.getrandbits(8) for _ in range(rf.TAIL_BYTES))
    cases = {
        "dataloader": (dl_size, sparse_reader([(dl_size - rf.TAIL_BYTES, floats)])),
        "random bytes, rpc-sized": ((16 * MiB + 5) * 10, sparse_reader([((16 * MiB + 5) * 10 - rf.TAIL_BYTES, floats)])),
        "truncated rpc": (100_000_000, fixture("rpc-tp4-reader2-stuck")[1]),
        "empty": (0, sparse_reader([])),
        "128-byte same-node probe": (128, sparse_reader([])),
    }
    # Flags that parse but "written" chunks that are not vLLM chunks.
    size = (16 * MiB + 5) * 10
    cases["flags ok, chunks garbage"] = (size, sparse_reader([(i * 16 * MiB, b"\x07garbage") for i in range(10)]
                                                              + [(10 * 16 * MiB, b"\x01\x00\x00\x00\x00" * 10)]))
    for label, (sz, read) in cases.items():
        dec = decode(sz, read)
        assert dec.geometry is None, label
        assert dec.reason, label


def test_chunk_formats() -> None:
    assert rf.head_format(b"\x00\x00\x01\x00\x00\x00\x27\x80\x05") == "new"
    assert rf.head_format(b"\x00\x80\x05\x95") == "old"
    assert rf.head_format(b"\x01") == "overflow"
    assert rf.head_format(b"\x02\x80\x05") is None
    assert rf.head_format(b"") is None


@settings(max_examples=300, deadline=None)
@given(size=st.integers(min_value=-1, max_value=1 << 34), tail=st.binary(max_size=rf.TAIL_BYTES),
       head=st.binary(max_size=rf.HEAD_BYTES), mappers=st.one_of(st.none(), st.integers(0, 80)))
def test_fuzz_decoder_never_raises(size: int, tail: bytes, head: bytes, mappers: int | None) -> None:
    heads = {o: head for o in rf.plan_heads(size, tail)}
    dec = rf.decide(size, tail, heads, mappers)
    if dec.geometry is None:
        assert dec.reason
        return
    geo = dec.geometry
    assert (geo.max_chunk_bytes + 1 + geo.n_reader) * geo.max_chunks == size
    assert all(v in (0, 1) for s in dec.slots for v in s)
    rf.writer_index(dec.slots, geo.n_reader)
    rf.scan_chunk(head, dec.fmt)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=rf.SCAN_BYTES), st.sampled_from(["new", "old", "unknown", None]))
def test_fuzz_scan_chunk(chunk: bytes, fmt: str | None) -> None:
    out = rf.scan_chunk(chunk, fmt)
    assert set(out) == {"overflow", "method", "status"}


@settings(max_examples=300, deadline=None)
@given(k=st.integers(1, 64), c_mib=st.integers(1, 32), n=st.integers(1, 64),
       flags=st.binary(max_size=rf.TAIL_BYTES).map(lambda b: bytes(x & 1 for x in b)), head=st.binary(max_size=16))
def test_fuzz_decoder_on_solvable_sizes(k: int, c_mib: int, n: int, flags: bytes, head: bytes) -> None:
    """Sizes that do solve the equation, flag bytes that are all 0/1, random chunk heads."""
    size = (c_mib * MiB + 1 + n) * k
    tail = bytes(rf.TAIL_BYTES - len(flags)) + flags
    dec = rf.decide(size, tail[-min(size, rf.TAIL_BYTES):], {o: head for o in rf.plan_heads(size, tail)}, n + 1)
    if dec.geometry is not None:
        assert all(rf.head_format(head) for s in dec.slots if s[0] == 1)
        assert 0 <= max(rf.unread_per_reader(dec.slots, dec.geometry.n_reader)) <= dec.geometry.max_chunks
        rf.writer_index(dec.slots, dec.geometry.n_reader)
    else:
        assert dec.reason


def test_one_geometry_for_the_gate_and_the_decoder() -> None:
    """The gate sizes /dev/shm with the geometry the decoder solves for (one statement, issue 16)."""
    from vllmdiag.gate.shm_sizing import ring_bytes

    for tp in (2, 8):
        rpc = rf.Geometry(rf.RPC_CHUNKS, rf.RPC_CHUNK_BYTES, tp)
        assert ring_bytes(tp)["rpc_broadcast"] == rpc.size_bytes and rpc in rf.solve_size(rpc.size_bytes)
        tp_ring = rf.Geometry(rf.TP_CHUNKS, rf.TP_CHUNK_BYTES, tp - 1)
        assert ring_bytes(tp)["tp_broadcaster"] == tp_ring.size_bytes and tp_ring in rf.solve_size(tp_ring.size_bytes)
