"""What a /dev/shm entry is, from its name and size alone (pure): the one list of the kinds vLLM (and the
libraries it runs) leaves in /dev/shm, for every command. The shm probe records the kind; triage's leak
finding, the gate's leak check and anything else that calls a segment a killed run's leftover ask
`leftovers` here, so two commands never give one node two answers (issue 33). Analysis reads the kind
again for snapshots written before a kind was known, as titles.py does for process titles.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from vllmdiag.probes._ringfmt import PRIORS, solve_size

MiB = 1 << 20
PSM = re.compile(r"psm_[0-9a-f]{8}")
# vLLM's CPU platform all-reduce buffers (vllm/distributed/device_communicators/cpu_communicator.py,
# _CPUSHMDistributed): `{VLLM_DIST_IDENT}-{group}-[{ranks}]-cpushm` + `_{rank}` per rank. The ident is set by
# the CPU worker: 0.32 takes the basename of a file:// init path (`vllm_dist_<uuid4 hex>`), otherwise (and
# always on 0.16: `distributed_init_method.split(":")[-1]`) the TCP port, e.g. `49889-tp:0-[0-1]-cpushm_0`.
CPUSHM = re.compile(r"(?:vllm_dist_[0-9a-f]{8,32}|\d{1,5})-[^/]{1,64}-\[[0-9-]{1,64}\]-cpushm(?:_\d{1,4})?")
# multiprocessing's named semaphores (SemLock: `/mp-` + 8 of [a-z0-9_]); glibc stores one as
# /dev/shm/sem.<name>. vLLM's spawned processes (workers, engines) keep theirs linked until the resource
# tracker unlinks them, so a kill -9 of the whole group leaves them behind.
MP_SEM = re.compile(r"sem\.mp-[a-z0-9_]{8}")
PREFIXES = (("vllm_mm_", "vllm_mm"), ("vllm_offload_", "vllm_offload"), ("vllm_ec_", "vllm_ec"), ("nccl-", "nccl"),
            ("sem.", "semaphore"))


@dataclass(frozen=True)
class ShmKind:
    kind: str  # the probe's `kind` field
    owner: str  # who creates it
    what: str  # the words a finding uses
    sizes: str  # the sizes seen (real-vllm-cpu.md, vllm-internals 1.10-1.13)
    leftover: bool  # a killed run leaves it: unmapped and not empty, it is listed as a leftover


KINDS: dict[str, ShmKind] = {k.kind: k for k in (
    ShmKind("psm", "vLLM (MessageQueue)", "vLLM ring", "(chunk + 1 + readers) x chunks: rpc 16 MiB x 10, a response "
            "ring 24 MiB x 10, the TP broadcaster 4 MiB x 6; only a size that fits that geometry is vLLM's", True),
    ShmKind("vllm_cpushm", "vLLM (CPU platform)", "vLLM CPU all-reduce buffer", "4 MiB + 256 B per rank of a TP or PP group",
            True),
    ShmKind("vllm_mm", "vLLM", "vLLM multimodal cache", "mm_processor_cache_gb (4 GiB) + 32 B", True),
    ShmKind("vllm_offload", "vLLM", "vLLM KV offload region", "the CPU offload size", True),
    ShmKind("vllm_ec", "vLLM", "vLLM encoder-cache region", "the encoder cache size", True),
    ShmKind("nccl", "NCCL", "NCCL buffer", "NCCL's shm transport", True),
    ShmKind("mp_semaphore", "multiprocessing", "multiprocessing semaphore", "32 B (one page held)", True),
    ShmKind("semaphore", "another program", "POSIX semaphore", "32 B", False),
    ShmKind("other", "another program", "not vLLM's", "any", False),
)}


def classify_name(name: str) -> str:
    if PSM.fullmatch(name):
        return "psm"
    if CPUSHM.fullmatch(name):
        return "vllm_cpushm"
    if MP_SEM.fullmatch(name):
        return "mp_semaphore"
    return next((kind for prefix, kind in PREFIXES if name.startswith(prefix)), "other")


def segment_kind(seg: dict[str, Any]) -> str:
    """The probe's kind, or the name's for snapshots written before a kind was known ("other", "semaphore")."""
    kind = str(seg.get("kind") or "other")
    return classify_name(str(seg.get("name") or "")) if kind in ("other", "semaphore") else kind


def is_vllm_ring_size(size: int) -> bool:
    """A `psm_*` is vLLM's only when its size fits a ring: multiprocessing.shared_memory names every
    segment so (a DataLoader's, any script's)."""
    return bool(solve_size(size))


def describe(seg: dict[str, Any]) -> str:
    """`vLLM ring 16 MiB x 10, 2 reader(s)`: what a segment is, with its geometry when it is a ring."""
    kind = segment_kind(seg)
    what = KINDS.get(kind, KINDS["other"]).what
    if kind == "psm":
        # A size fits several (chunks, chunk bytes, readers); vLLM's own queues use a few known ones.
        known = [g for g in solve_size(int(seg.get("size_bytes") or 0)) if (g.max_chunk_bytes, g.max_chunks) in PRIORS]
        if len(known) == 1:
            g = known[0]
            return f"{what} {g.max_chunk_bytes / MiB:g} MiB x {g.max_chunks}, {g.n_reader} reader(s)"
    return what


def is_leftover(seg: dict[str, Any], min_age_s: float = 0.0) -> bool:
    """A segment of a kind a killed run leaves behind, mapped by no process (neither a vLLM one nor any
    other whose maps were read), not empty (0 bytes is a creator between shm_open and ftruncate) and at
    least min_age_s old."""
    kind = segment_kind(seg)
    size = int(seg.get("size_bytes") or 0)
    return (KINDS.get(kind, KINDS["other"]).leftover and size > 0
            and not seg.get("mapped_by") and not seg.get("mapped_by_other")
            and float(seg.get("age_s") or 0) >= min_age_s
            and (kind != "psm" or is_vllm_ring_size(size)))


def leftovers(segments: Iterable[Any], min_age_s: float = 0.0, torn_down: Collection[str] = ()) -> list[dict[str, Any]]:
    """The shm probe's segments that a killed run left, largest allocation first, each with its `kind` and
    `what`. ``torn_down``: names a look saw unlinked meanwhile (the rings probe): being removed, not left."""
    out = [{**s, "kind": segment_kind(s), "what": describe(s)} for s in segments
           if isinstance(s, dict) and is_leftover(s, min_age_s) and s.get("name") not in torn_down]
    out.sort(key=lambda s: (-int(s.get("allocated_bytes") or 0), -int(s.get("size_bytes") or 0), str(s.get("name"))))
    return out


def unseen_maps(shm: dict[str, Any]) -> int:
    """Processes whose memory maps could not be read: "mapped by no process" is then unsure (issue 15, item 4)."""
    return len(shm.get("unreadable_pids") or []) + int(shm.get("unreadable_other_pids") or 0)


def by_kind(found: Iterable[dict[str, Any]]) -> str:
    """`4 vLLM ring(s) (664.0 MiB apparent), 2 vLLM CPU all-reduce buffer(s) (8.0 MiB apparent), ...`"""
    counts: dict[str, list[int]] = {}
    for s in found:
        c = counts.setdefault(KINDS.get(str(s.get("kind")), KINDS["other"]).what, [0, 0])
        c[0], c[1] = c[0] + 1, c[1] + int(s.get("size_bytes") or 0)
    return ", ".join(f"{n} {what}(s) ({_size(size)} apparent)" for what, (n, size) in counts.items())


def _size(n: int) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"
