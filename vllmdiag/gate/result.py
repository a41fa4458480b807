"""Gate results: one CheckResult per check, grouped per node, and the fleet result over nodes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllmdiag.model import Snapshot

SCHEMA_VERSION = 1
# skip: the check could not look (its probe is absent or skipped); never fails the gate by itself.
STATUSES = ("pass", "warn", "fail", "skip")
EXIT_PASS, EXIT_FAIL = 0, 1


@dataclass
class CheckResult:
    name: str
    status: str
    reason: str
    numbers: dict[str, Any] = field(default_factory=dict)
    required: bool = True
    duration_s: float = 0.0  # measured: the request it made (URL checks) plus its evaluation
    @property
    def blocks(self) -> bool:
        return self.required and self.status == "fail"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "required": self.required, "reason": self.reason,
                "numbers": self.numbers}


def result(name: str, status: str, reason: str, **numbers: Any) -> CheckResult:
    assert status in STATUSES, status
    return CheckResult(name, status, reason, numbers)


@dataclass
class NodeGateResult:
    node: str
    checks: list[CheckResult]
    snapshot: Snapshot | None = None
    duration_s: float = 0.0

    @property
    def passed(self) -> bool:
        return not any(c.blocks for c in self.checks)

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_FAIL

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for c in self.checks if c.status == s) for s in STATUSES}

    def to_dict(self, with_snapshot: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "node": self.node,
            "status": "pass" if self.passed else "fail",
            "failed_required": [c.name for c in self.checks if c.blocks],
            "counts": self.counts(),
            "duration_s": round(self.duration_s, 4),
            "checks": [c.to_dict() for c in self.checks],
        }
        if with_snapshot and self.snapshot is not None:
            out["snapshot"] = self.snapshot.to_dict()
        return out


@dataclass
class FleetGateResult:
    nodes: dict[str, NodeGateResult]
    fleet_checks: list[CheckResult] = field(default_factory=list)  # whole-fleet summaries of cross-node checks

    @property
    def passed(self) -> bool:
        # A gate over zero nodes checked nothing: it never passes (issue 25 item 5).
        return bool(self.nodes) and all(n.passed for n in self.nodes.values()) \
            and not any(c.blocks for c in self.fleet_checks)

    @property
    def exit_code(self) -> int:
        return EXIT_PASS if self.passed else EXIT_FAIL

    def to_dict(self, with_snapshots: bool = False) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "status": "pass" if self.passed else "fail",
            "failed_nodes": sorted(n for n, r in self.nodes.items() if not r.passed),
            "fleet_checks": [c.to_dict() for c in self.fleet_checks],
            "nodes": [r.to_dict(with_snapshots) for _, r in sorted(self.nodes.items())],
        }
