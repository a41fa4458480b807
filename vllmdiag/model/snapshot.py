"""The snapshot contract: the raw facts probes collect on a node.

Everything here round-trips through plain JSON without loss (``from_dict(to_dict(x)) == x``),
because a snapshot written on a node must give the same verdict when analysed anywhere later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.model._check import SnapshotError
from vllmdiag.model._check import expect_dict as _expect_dict

SCHEMA_VERSION = 1

PROBE_STATUSES = ("ok", "partial", "skipped", "error", "timeout")


@dataclass
class ProbeResult:
    status: str
    duration_s: float
    reason: str | None = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        # ``data`` holds plain JSON values (probes return them; the collector's pipe carries JSON):
        # handed over as it is, for the encoder to read. asdict deep-copied every frame of every
        # stack (~40 ms of a TP=8 triage's --json).
        return {"status": self.status, "duration_s": self.duration_s, "reason": self.reason, "data": self.data}

    @classmethod
    def from_dict(cls, raw: Any, where: str) -> ProbeResult:
        obj = _expect_dict(raw, where)
        status = obj.get("status")
        if status not in PROBE_STATUSES:
            raise SnapshotError(f"{where}: status {status!r} is not one of {', '.join(PROBE_STATUSES)}")
        duration = obj.get("duration_s", 0.0)
        if not isinstance(duration, (int, float)) or isinstance(duration, bool):
            raise SnapshotError(f"{where}: duration_s must be a number")
        reason = obj.get("reason")
        if reason is not None and not isinstance(reason, str):
            raise SnapshotError(f"{where}: reason must be a string or null")
        data = _expect_dict(obj.get("data", {}), f"{where}.data")
        return cls(status=status, duration_s=float(duration), reason=reason, data=data)


@dataclass
class Snapshot:
    node: str
    collected_at: str
    vllmdiag_version: str
    duration_s: float
    probes: dict[str, ProbeResult] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    schema_version: int = SCHEMA_VERSION
    # Follow-up passes of the cheap probes taken by triage's confirm window (oldest first, each with
    # its own collected_at), so `analyze` of a saved file judges progress over the same window.
    passes: list[Snapshot] = field(default_factory=list)

    def data(self, probe: str) -> dict[str, Any]:
        """The probe's data, or {} when the probe did not run or produced nothing."""
        result = self.probes.get(probe)
        return result.data if result is not None else {}

    def status(self, probe: str) -> str | None:
        result = self.probes.get(probe)
        return result.status if result is not None else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": self.schema_version,
            "node": self.node,
            "collected_at": self.collected_at,
            "vllmdiag_version": self.vllmdiag_version,
            "duration_s": self.duration_s,
            "options": self.options,
            "probes": {name: res.to_dict() for name, res in self.probes.items()},
            **({"passes": [p.to_dict() for p in self.passes]} if self.passes else {}),
        }

    @classmethod
    def from_dict(cls, raw: Any, where: str = "snapshot") -> Snapshot:
        obj = _expect_dict(raw, where)
        version = obj.get("schema_version")
        if version != SCHEMA_VERSION:
            raise SnapshotError(f"{where}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION})")
        node = obj.get("node")
        if not isinstance(node, str) or not node:
            raise SnapshotError(f"{where}: node must be a non-empty string")
        probes_raw = _expect_dict(obj.get("probes", {}), f"{where}.probes")
        check_depth([probes_raw, obj.get("options")], f"{where}")
        probes = {str(k): ProbeResult.from_dict(v, f"{where}.probes.{k}") for k, v in probes_raw.items()}
        duration = obj.get("duration_s", 0.0)
        if not isinstance(duration, (int, float)) or isinstance(duration, bool):
            raise SnapshotError(f"{where}: duration_s must be a number")
        return cls(
            node=node,
            collected_at=str(obj.get("collected_at", "")),
            vllmdiag_version=str(obj.get("vllmdiag_version", "")),
            duration_s=float(duration),
            probes=probes,
            options=_expect_dict(obj.get("options", {}), f"{where}.options"),
            schema_version=version,
            passes=_passes(obj.get("passes"), where),
        )


MAX_PASSES = 256


def _passes(raw: Any, where: str) -> list[Snapshot]:
    if raw is None:
        return []
    if not isinstance(raw, list) or len(raw) > MAX_PASSES:
        raise SnapshotError(f"{where}.passes: must be a list of at most {MAX_PASSES} snapshots")
    out = []
    for i, item in enumerate(raw):
        if isinstance(item, dict) and item.get("passes"):
            raise SnapshotError(f"{where}.passes[{i}]: a follow-up pass cannot hold passes of its own")
        out.append(Snapshot.from_dict(item, f"{where}.passes[{i}]"))
    return out


MAX_DEPTH = 64  # real snapshots nest ~10 deep; Python's own recursion (asdict, json.dumps) breaks near 1000


def check_depth(raw: Any, where: str, limit: int = MAX_DEPTH) -> None:
    """Refuse absurdly nested input before anything recursive walks it (issue 15 item 7: a deeply nested
    snapshot ended in a RecursionError, exit 4). Level by level, no recursion: ~1 ms per 100 KB."""
    level = [raw]
    for _ in range(limit + 1):
        nxt: list[Any] = []
        for x in level:
            if isinstance(x, dict):
                nxt.extend(v for v in x.values() if isinstance(v, (dict, list)) and v)
            elif isinstance(x, list):
                nxt.extend(v for v in x if isinstance(v, (dict, list)) and v)
        if not nxt:
            return
        level = nxt
    raise SnapshotError(f"{where}: nested deeper than {limit} levels; not a snapshot")
