"""The simulator's ring layout agrees with segments written by the real vLLM 0.33.0."""

from __future__ import annotations

import gzip
import json
import os
import re
import threading
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vllmdiag_sim import ringfmt
from vllmdiag_sim.vllm.distributed.device_communicators.shm_broadcast import MessageQueue

DATA = Path(__file__).parent.parent / "data" / "rings"
SHARED = Path(__file__).resolve().parents[3] / "shared" / "data" / "vllm-0.33.0"
CASES = {  # fixture -> (unread per reader, slots written)
    "rpc-tp4-reader2-stuck": ([0, 0, 10, 0], 10),
    "response-3-unread": ([3], 3),
    "tp-broadcaster-3readers-2read": ([0, 0, 0], 2),
}
NONZERO_RUN = re.compile(rb"[^\x00](?:\x00{0,7}[^\x00])*")
pytestmark = pytest.mark.timeout(60)


def compact_segment(name: str, out: Path) -> tuple[Path, dict[str, int]]:
    """Rebuild the exact segment file (sparse) from the repo's non-zero extents."""
    data = json.loads((DATA / f"{name}.json").read_text())
    path = out / name
    with open(path, "wb") as f:
        f.truncate(data["size_bytes"])
        for offset, hexbytes in data["extents"]:
            f.seek(offset)
            f.write(bytes.fromhex(hexbytes))
    return path, data["description"]


def check_against_description(path: Path, desc: dict[str, int], name: str) -> None:
    size = path.stat().st_size
    geo = ringfmt.Geometry(desc["n_reader"], desc["max_chunk_bytes"], desc["max_chunks"])
    assert geo.total_bytes == size
    assert geo in ringfmt.geometry_from_size(size)
    with open(path, "rb") as f:
        f.seek(geo.metadata_offset)
        meta = f.read()
        flags = ringfmt.slot_flags(meta, ringfmt.Geometry(geo.n_reader, 0, geo.max_chunks))
        want_unread, want_written = CASES[name]
        assert ringfmt.unread_counts(flags, geo.n_reader) == want_unread
        assert sum(w for w, _ in flags) == want_written
        for i, (written, _) in enumerate(flags):
            if written:
                f.seek(geo.chunk_offset(i))
                head = ringfmt.parse_chunk(f.read(4096))
                assert not head.overflow and head.is_pickle5 and len(head.frame_lengths) == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_compact_real_fixtures_decode(name: str, tmp_path: Path) -> None:
    path, desc = compact_segment(name, tmp_path)
    check_against_description(path, desc, name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_real_gz_fixtures_decode(name: str, tmp_path: Path) -> None:
    gz = SHARED / f"{name}.segment.gz"
    if not gz.exists():
        pytest.skip(f"{gz} not available")
    path = tmp_path / name
    with gzip.open(gz, "rb") as src, open(path, "wb") as dst:
        while block := src.read(1 << 20):
            if block.count(0) == len(block):
                dst.seek(len(block), os.SEEK_CUR)  # keep the copy sparse, like tmpfs
            else:
                dst.write(block)
        dst.truncate()
    check_against_description(path, json.loads((SHARED / f"{name}.json").read_text()), name)


def fixture_extents(name: str) -> list[tuple[int, str]]:
    return [(o, h) for o, h in json.loads((DATA / f"{name}.json").read_text())["extents"]]


def segment_extents(shm_name: str, geo: ringfmt.Geometry) -> list[tuple[int, str]]:
    """Non-zero byte runs (gaps under 8 bytes merged), in the fixtures' format.

    Only chunk heads and the metadata region are read: the rest of a ring is never written.
    """
    regions = [(geo.chunk_offset(i), 1 << 16) for i in range(geo.max_chunks)]
    regions.append((geo.metadata_offset, geo.max_chunks * geo.metadata_size))
    runs = []
    with open(f"/dev/shm/{shm_name}", "rb") as f:
        for offset, length in regions:
            f.seek(offset)
            data = f.read(length)
            runs += [(offset + m.start(), m.group().hex()) for m in NONZERO_RUN.finditer(data)]
    return runs


@pytest.mark.parametrize("name,geometry,messages,reads", [
    ("rpc-tp4-reader2-stuck", ringfmt.rpc_geometry(4), [("execute_model", (i,), {}, 0) for i in range(13)],
     [13, 13, 3, 13]),
    ("response-3-unread", ringfmt.response_geometry(), [("SUCCESS", {"req": i}) for i in range(3)], [0]),
    ("tp-broadcaster-3readers-2read", ringfmt.tp_broadcaster_geometry(4), [{"broadcast": i} for i in range(2)],
     [2, 2, 2]),
])
def test_sim_writer_produces_the_real_bytes(name: str, geometry: ringfmt.Geometry, messages: list[object],
                                            reads: list[int], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Same messages, same reads -> the same non-zero bytes as real vLLM, byte for byte."""
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path))
    n = geometry.n_reader
    writer = MessageQueue(n, n, max_chunk_bytes=geometry.max_chunk_bytes, max_chunks=geometry.max_chunks)
    readers = [MessageQueue.create_from_handle(writer.export_handle(), r) for r in range(n)]
    try:
        sent = [0] * n
        for msg in messages:
            writer.enqueue(msg)
            for r, reader in enumerate(readers):
                while sent[r] < reads[r] and reader_can_read(writer, reader):
                    reader.dequeue(timeout=1)
                    sent[r] += 1
        assert sent == reads
        assert segment_extents(writer.buffer.shared_memory_name, geometry) == fixture_extents(name)
        if name.startswith("rpc"):
            with pytest.raises(TimeoutError):  # ring full: the writer would block in acquire_write
                writer.enqueue(("execute_model", (13,), {}, 0), timeout=0.2)
    finally:
        for reader in readers:
            reader.close()
        writer.close()
    assert not os.path.exists(f"/dev/shm/{writer.buffer.shared_memory_name}")


def reader_can_read(writer: MessageQueue, reader: MessageQueue) -> bool:
    with reader.buffer.get_metadata(reader.current_idx) as meta:
        return bool(meta[0] == 1 and meta[reader.local_reader_rank + 1] == 0)


@given(st.lists(st.binary(max_size=64), min_size=1, max_size=4))
def test_chunk_roundtrip(frames: list[bytes]) -> None:
    chunk = ringfmt.chunk_bytes(frames)
    head = ringfmt.parse_chunk(chunk)
    assert head.frame_lengths == [len(f) for f in frames] and not head.overflow
    assert chunk[1:3] == len(frames).to_bytes(2, "big")


def test_writer_and_reader_processes_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader in a thread sees every message in order, including an overflow one."""
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", str(tmp_path))
    writer = MessageQueue(1, 1, max_chunk_bytes=1 << 16, max_chunks=4)
    reader = MessageQueue.create_from_handle(writer.export_handle(), 0)
    got: list[object] = []
    t = threading.Thread(target=lambda: got.extend(reader.dequeue(timeout=5) for _ in range(6)))
    try:
        t.start()
        for i in range(5):
            writer.enqueue(("execute_model", (i,), {}, 0))
        writer.enqueue(b"x" * (1 << 17))  # does not fit: overflow byte + XPUB multipart
        t.join(10)
        assert got[:5] == [("execute_model", (i,), {}, 0) for i in range(5)] and got[5] == b"x" * (1 << 17)
    finally:
        reader.close()
        writer.close()
