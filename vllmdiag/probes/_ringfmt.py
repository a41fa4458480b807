"""Pure decoder of vLLM `ShmRingBuffer` segments seen from outside (vllm-internals 1.2-1.5, 1.12).

No I/O here: the probe reads the file's tail (every candidate's metadata region is a suffix of
it) and the few chunk heads `plan_heads` asks for, then `decide` picks the geometry. Nothing is
ever unpickled; chunk contents are only scanned for ASCII names. Written from the reference on
purpose, without importing the simulator's writer: a bug shared by both would hide itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

MiB = 1 << 20
MAX_CHUNKS = MAX_READERS = 64
TAIL_BYTES = MAX_CHUNKS * (1 + MAX_READERS)  # covers the metadata region of every candidate
HEAD_BYTES = 16  # overflow byte + count + length + pickle magic of a chunk
SCAN_BYTES = 2048  # enough for the rpc tuple's method name, even behind a pickled callable
# vLLM 0.33's queues with default settings (1.10), the one statement of them (the gate sizes /dev/shm
# from these too): (max_chunk_bytes, max_chunks); readers: rpc = TP ranks, response = 1, broadcaster = TP-1.
RPC_CHUNK_BYTES, RPC_CHUNKS = 16 * MiB, 10  # rpc_broadcast_mq (VLLM_MQ_MAX_CHUNK_BYTES_MB default)
RESPONSE_CHUNK_BYTES, RESPONSE_CHUNKS = 24 * MiB, 10  # worker_response_mq: MessageQueue(1, 1) class default
TP_CHUNK_BYTES, TP_CHUNKS = 4 * MiB, 6  # GroupCoordinator mq_broadcaster: create_from_process_group(.., 1 << 22, 6)
PRIORS = {(RPC_CHUNK_BYTES, RPC_CHUNKS): "rpc_broadcast_mq default (16 MiB x 10)",
          (RESPONSE_CHUNK_BYTES, RESPONSE_CHUNKS): "worker_response_mq (24 MiB x 10)",
          (TP_CHUNK_BYTES, TP_CHUNKS): "group mq_broadcaster (4 MiB x 6)", (10 * MiB, 10): "pre-0.12 default (10 MiB x 10)"}
RPC_METHODS = ("execute_model", "sample_tokens", "execute_dummy_batch", "take_draft_token_ids", "check_health",
               "collective_rpc", "determine_available_memory", "initialize_from_config", "compile_or_warm_up_model",
               "get_kv_cache_spec", "load_model", "init_device", "profile", "sleep", "wake_up", "shutdown")
_METHOD_RE = re.compile(b"|".join(re.escape(m.encode()) for m in sorted(RPC_METHODS, key=len, reverse=True)))
# The rpc tuple `(method, args, kwargs, output_rank)` pickles as MARK, SHORT_BINUNICODE <len> <name>.
_TUPLE_HEAD = re.compile(rb"\x80\x05(?:\x95[\x00-\xff]{8})?\x28\x8c([\x01-\x40])")
# vLLM 0.33 pickles WorkerProc.ResponseStatus by value: the class reference, then BININT1 1/2/3
# (checked on chunks written by the real code, tests/data/vllm-real/chunks.json). The names are a
# fallback for other pickles of the enum.
_STATUS_BY_VALUE = re.compile(rb"\x8c\x19WorkerProc\.ResponseStatus\x94?\x93\x94?K([\x01-\x03])")
_STATUS_VALUES = {1: "SUCCESS", 2: "FAILURE", 3: "FAILURE_WITH_KV_OUTPUT"}
_STATUS_RE = re.compile(rb"\x8c[\x07\x16](SUCCESS|FAILURE_WITH_KV_OUTPUT|FAILURE)")
_IDENT = re.compile(rb"[a-z_][a-z0-9_]{1,63}")

Slots = list[tuple[int, ...]]  # per slot: (written, read_0, .., read_{n-1})


@dataclass(frozen=True)
class Geometry:
    max_chunks: int  # K
    max_chunk_bytes: int  # C
    n_reader: int  # n

    @property
    def size_bytes(self) -> int:
        """The segment's size: K chunks of C bytes, then K metadata rows of (written + n read flags)."""
        return (self.max_chunk_bytes + 1 + self.n_reader) * self.max_chunks

    @property
    def metadata_offset(self) -> int:
        return self.max_chunk_bytes * self.max_chunks

    @property
    def metadata_bytes(self) -> int:
        return self.max_chunks * (1 + self.n_reader)

    def chunk_offset(self, idx: int) -> int:
        return idx * self.max_chunk_bytes

    def to_dict(self) -> dict[str, int]:
        return {"max_chunks": self.max_chunks, "max_chunk_bytes": self.max_chunk_bytes, "n_reader": self.n_reader}


@dataclass
class Decision:
    """The chosen geometry, or `geometry=None` with the reason the segment is not a vLLM ring."""

    geometry: Geometry | None
    reason: str
    fmt: str | None = None  # "new" (>= 0.12), "old", or "unknown" (nothing pickled seen yet)
    score: int = 0
    slots: Slots = field(default_factory=list)
    candidates: list[dict[str, object]] = field(default_factory=list)


def solve_size(size: int) -> list[Geometry]:
    """Every (K, C, n) with size = (C + 1 + n) * K, C a whole (non-zero) number of MiB, 1 <= n <= 64."""
    out = []
    for k in range(1, MAX_CHUNKS + 1):
        if size <= 0 or size % k:
            continue
        per = size // k
        n = per % MiB - 1
        if 1 <= n <= MAX_READERS and per - n - 1 >= MiB:
            out.append(Geometry(k, per - n - 1, n))
    return out


def tail_span(size: int) -> tuple[int, int]:
    """(offset, length) of the suffix to read once: it holds the metadata of every candidate."""
    length = min(size, TAIL_BYTES) if size > 0 else 0
    return size - length, length


def parse_slots(tail: bytes, geo: Geometry) -> Slots | None:
    """Per-slot flags from the file's tail, or None when any flag byte is not 0/1."""
    need = geo.metadata_bytes
    if len(tail) < need:
        return None
    meta = tail[len(tail) - need:]
    if meta.strip(b"\x00\x01"):
        return None
    step = 1 + geo.n_reader
    return [tuple(meta[i:i + step]) for i in range(0, need, step)]


def head_format(head: bytes) -> str | None:
    """"overflow", "new" (pickle at offset 7), "old" (pickle at offset 1), or None: not a vLLM chunk."""
    if head[:1] == b"\x01":
        return "overflow"
    if head[:1] != b"\x00":
        return None
    if head[7:9] == b"\x80\x05":
        return "new"
    return "old" if head[1:3] == b"\x80\x05" else None


def plan_heads(size: int, tail: bytes) -> list[int]:
    """Offsets of the chunk heads `decide` needs: written slots of every candidate whose flags parse."""
    offsets: set[int] = set()
    for geo in solve_size(size):
        slots = parse_slots(tail, geo)
        for i, s in enumerate(slots or []):
            if s[0] == 1:
                offsets.add(geo.chunk_offset(i))
    return sorted(offsets)


def decide(size: int, tail: bytes, heads: Mapping[int, bytes], n_mappers: int | None = None) -> Decision:
    """Score each size solution (1.12 step 2) and keep the best one that passes every hard check."""
    geos = solve_size(size)
    if not geos:
        return Decision(None, f"size {size} solves (C + 1 + n) * K for no whole-MiB C, n in 1..64, K in 1..64")
    scored: list[tuple[int, Geometry, str, str, Slots]] = []
    rejects = []
    for geo in geos:
        slots = parse_slots(tail, geo)
        if slots is None:
            rejects.append(f"{_label(geo)}: metadata bytes not all 0/1")
            continue
        fmt, why = _chunk_format(geo, slots, heads)
        if fmt is None:
            rejects.append(f"{_label(geo)}: {why}")
            continue
        score, reasons = _score(geo, fmt, n_mappers)
        if score > 0:
            scored.append((score, geo, fmt, ", ".join([why] + reasons), slots))
        else:
            rejects.append(f"{_label(geo)}: no written slot, no known geometry, no matching mapper count")
    if not scored:
        return Decision(None, "not a vLLM ring: " + "; ".join(rejects[:4]))
    scored.sort(key=lambda c: (-c[0], c[1].max_chunks != 10, -c[1].max_chunks))
    best = scored[0]
    cands: list[dict[str, object]] = [{**g.to_dict(), "score": s, "reason": r} for s, g, _f, r, _sl in scored[:4]]
    return Decision(best[1], best[3], best[2], best[0], best[4], cands)


def _chunk_format(geo: Geometry, slots: Slots, heads: Mapping[int, bytes]) -> tuple[str | None, str]:
    formats = set()
    for i, s in enumerate(slots):
        if s[0] != 1:
            continue
        head = heads.get(geo.chunk_offset(i), b"")
        fmt = head_format(head)
        if fmt is None:
            return None, f"written slot {i} does not start like a vLLM chunk ({head[:9].hex() or 'unread'})"
        formats.add(fmt)
    formats.discard("overflow")
    if len(formats) > 1:
        return None, "written slots mix the old and new chunk formats"
    if not formats:
        return "unknown", "no pickled chunk seen"
    fmt = formats.pop()
    return fmt, f"chunk heads in the {'>= 0.12' if fmt == 'new' else 'pre-0.12'} format"


def _score(geo: Geometry, fmt: str, n_mappers: int | None) -> tuple[int, list[str]]:
    score = 4 if fmt in ("new", "old") else 0
    reasons: list[str] = []
    prior = PRIORS.get((geo.max_chunk_bytes, geo.max_chunks))
    if prior:
        score, reasons = score + 3, reasons + [prior]
    elif geo.max_chunks == 10:
        # A custom VLLM_MQ_MAX_CHUNK_BYTES_MB keeps vLLM's 10 chunks.
        score, reasons = score + 1, reasons + [f"custom {geo.max_chunk_bytes // MiB} MiB x 10"]
    if n_mappers and n_mappers == geo.n_reader + 1:
        score, reasons = score + 2, reasons + [f"{n_mappers} mapping processes = n_reader + 1"]
    return score, reasons


def _label(geo: Geometry) -> str:
    return f"{geo.max_chunk_bytes // MiB} MiB x {geo.max_chunks}, n={geo.n_reader}"


def unread_per_reader(slots: Slots, n_reader: int) -> list[int]:
    """Slots published (written=1) that reader r has not read yet (1.12 step 5)."""
    return [sum(1 for s in slots if s[0] == 1 and s[1 + r] == 0) for r in range(n_reader)]


def filling_slots(slots: Slots) -> list[int]:
    """written=0 with read flags still 1: the writer is inside `acquire_write` on that slot (1.3)."""
    return [i for i, s in enumerate(slots) if s[0] == 0 and any(s[1:])]


def writer_index(slots: Slots, n_reader: int) -> int | None:
    """The writer's next slot, when the flags pin it down; None when ambiguous or torn."""
    k = len(slots)
    filling = filling_slots(slots)
    if filling:
        return filling[0] if len(filling) == 1 else None
    unread = unread_per_reader(slots, n_reader)
    worst = max(range(n_reader), key=lambda r: unread[r], default=0)
    if 0 < unread[worst] < k:
        # A reader's unread slots form one cyclic run ending just before the writer's next slot.
        behind = [s[0] == 1 and s[1 + worst] == 0 for s in slots]
        ends = [i for i in range(k) if behind[i] and not behind[(i + 1) % k]]
        return (ends[0] + 1) % k if len(ends) == 1 else None
    if unread[worst] == 0:
        written = [s[0] for s in slots]
        m = written.index(0) if 0 in written else k
        # A ring that has not wrapped yet: slots 0..m-1 written, the rest never touched.
        if m < k and not any(written[m:]):
            return m
    return None


def scan_chunk(chunk: bytes, fmt: str | None) -> dict[str, object]:
    """ASCII peek at one chunk: rpc method name and reply status. Never unpickles (1.12 step 6)."""
    if chunk[:1] == b"\x01":
        return {"overflow": True, "method": None, "status": None}
    body = chunk[1:] if fmt == "old" else chunk[7:]
    if fmt != "old" and len(chunk) >= 7:
        # The rest of the chunk holds stale bytes of older messages: stop at the main pickle's end.
        body = body[: int.from_bytes(chunk[3:7], "big")]
    method = None
    m = _TUPLE_HEAD.match(body)
    if m:
        name = body[m.end(): m.end() + m.group(1)[0]]
        method = name.decode() if _IDENT.fullmatch(name) else None
    if method is None:
        found = _METHOD_RE.search(body)
        method = found.group(0).decode() if found else None
    return {"overflow": False, "method": method, "status": _status(body)}


def _status(body: bytes) -> str | None:
    by_value = _STATUS_BY_VALUE.search(body)
    if by_value:
        return _STATUS_VALUES[by_value.group(1)[0]]
    by_name = _STATUS_RE.search(body)
    return by_name.group(1).decode() if by_name else None


def flags_text(slots: Slots) -> str:
    """Compact per-sample record: one group of 0/1 digits per slot, e.g. '11101 11101 ...'."""
    return " ".join("".join(map(str, s)) for s in slots)


def slots_from_text(text: str) -> Slots:
    return [tuple(int(c) for c in group) for group in text.split()]


def stable(values: Sequence[list[int]]) -> list[int | None]:
    """Per position: the value when every sample agrees, else None."""
    if not values:
        return []
    return [v[0] if all(x == v[0] for x in v) else None for v in zip(*values, strict=True)]
