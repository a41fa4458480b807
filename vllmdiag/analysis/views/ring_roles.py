"""Who writes and who reads each shared-memory ring of a deployment (pure, never a finding): the engine's
broadcast ring, each worker's response ring, their readers by local rank. Read by the queue layer's
ring_flow analyzer and by the report model (analysis/report_model.py: ``DeploymentReport.rings``, from which
analysis/sections.py builds what the report shows of each ring; render keeps no copy of these rules)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.analysis.views.deployments import Deployment, display_title, role_of
from vllmdiag.model import Snapshot

WORKER_ROLES = ("worker", "worker_starting")

MiB = 1 << 20
MIN_WINDOW_S = 0.09  # two samples ~100 ms apart (timer slack allowed)


@dataclass
class RingRole:
    ring: dict[str, Any]
    role: str  # rpc_broadcast_mq | worker_response_mq | group_broadcaster | unknown
    deployment: Deployment | None = None
    writer: dict[str, Any] | None = None
    readers: list[dict[str, Any] | None] = field(default_factory=list)  # index = reader flag index

    @property
    def name(self) -> str:
        return str(self.ring.get("name"))

    @property
    def sampled(self) -> bool:
        return int(self.ring.get("sample_count", 0)) >= 2 and float(self.ring.get("window_s", 0.0)) >= MIN_WINDOW_S

    def reader_label(self, i: int) -> str:
        p = self.readers[i] if i < len(self.readers) else None
        return f"{display_title(p)} (pid {p['pid']})" if p else f"reader {i} (no live process)"


def ring_roles(snapshot: Snapshot, deployments: list[Deployment]) -> list[RingRole]:
    """Every decoded ring with its role, writer and readers (empty when nobody of ours maps it)."""
    out = []
    for ring in snapshot.data("rings").get("rings", []):
        mapped = set(ring.get("mapped_by") or [])
        dep = max(deployments, key=lambda d: len(d.pids & mapped), default=None)
        if dep is None or not dep.pids & mapped:
            out.append(RingRole(ring, "unknown"))
            continue
        out.append(_assign(ring, dep, [p for p in dep.processes if p["pid"] in mapped]))
    return out


def _assign(ring: dict[str, Any], dep: Deployment, mappers: list[dict[str, Any]]) -> RingRole:
    n = int(ring["geometry"]["n_reader"])
    engines = [p for p in mappers if role_of(p) == "engine_core"]
    workers = sorted((p for p in mappers if role_of(p) in WORKER_ROLES), key=_local_rank_key)
    if engines and (len(workers) != 1 or n != 1 or not _looks_like_response(ring, engines[0])):
        return RingRole(ring, "rpc_broadcast_mq", dep, engines[0], _rpc_readers(dep, engines[0], workers, n))
    if engines:
        return RingRole(ring, "worker_response_mq", dep, workers[0], [engines[0]])
    if workers:
        # Group broadcaster: TP rank 0 writes; readers are the other group ranks in order (1.12 step 4).
        return RingRole(ring, "group_broadcaster", dep, workers[0], (workers[1:] + [None] * n)[:n])
    return RingRole(ring, "unknown", dep)


def _looks_like_response(ring: dict[str, Any], engine: dict[str, Any]) -> bool:
    """An rpc ring with one worker (DP, TP=1) and a response ring are mapped by the same pair."""
    if ring.get("last_method"):
        return False
    if ring.get("last_status"):
        return True
    rpc_mb = str((engine.get("environ") or {}).get("VLLM_MQ_MAX_CHUNK_BYTES_MB", "16"))
    return bool(ring["geometry"]["max_chunk_bytes"] == 24 * MiB and rpc_mb != "24")


def _local_rank_key(p: dict[str, Any]) -> tuple[int, int, int, int]:
    r = p.get("ranks") or {}
    return (int(r.get("pp", 0)), int(r.get("pcp", 0)), int(r.get("tp", 0)), p["pid"])


def _rpc_readers(dep: Deployment, engine: dict[str, Any], mappers: list[dict[str, Any]], n: int
                 ) -> list[dict[str, Any] | None]:
    """Reader i is local rank i = (pp * PCP + pcp) * TP + tp (1.12 step 4), dead workers included."""
    own = [w for w in dep.with_role(*WORKER_ROLES) if w["ppid"] == engine["pid"] or w in mappers]
    ranked = [w for w in own if "tp" in (w.get("ranks") or {})]
    tp = max([int(w["ranks"]["tp"]) + 1 for w in ranked] + [dep.configured.get("tp", 1)])
    pcp = max([int(w["ranks"].get("pcp", 0)) + 1 for w in ranked] + [1])
    by_rank = {(int(w["ranks"].get("pp", 0)) * pcp + int(w["ranks"].get("pcp", 0))) * tp + int(w["ranks"]["tp"]): w
               for w in ranked}
    if len(by_rank) < n and len(own) == n:  # untitled workers: fall back to mapping order by pid
        return [*sorted(own, key=_local_rank_key)]
    return [by_rank.get(i) for i in range(n)]
