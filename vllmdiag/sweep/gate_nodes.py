"""``vllmdiag sweep --gate``: the pre-rollout gate on every node, collected by the same fan-out.

The node checks and the cross-node comparisons are the gate's (``vllmdiag.gate.cross_node.gate_fleet``);
this only runs the gate's probes remotely (``preflight`` is opt-in and enabled by naming it) and hands
over the snapshots, with the nodes that did not answer as failed ``collect`` checks.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from vllmdiag.sweep.fanout import Progress, SweepPlan, run_sweep
from vllmdiag.sweep.outcome import NodeOutcome


def gate_probes() -> tuple[str, ...]:
    """The gate's probes that this vllmdiag has (the nodes are assumed to run the same version)."""
    from vllmdiag.gate.run import WANTED
    from vllmdiag.registry import discover

    known = discover()
    return tuple(p for p in (*WANTED, "preflight") if p in known)


def sweep_gate(plan: SweepPlan, config: Path | None, tp: int | None = None,
               progress: Progress | None = None) -> tuple[Any, list[NodeOutcome]]:
    from vllmdiag.gate.config import load_config
    from vllmdiag.gate.cross_node import gate_fleet

    cfg = load_config(config).with_tp(tp)
    # No confirm window: the gate checks a node before rollout, it does not judge a hang.
    outcomes = run_sweep(replace(plan, transport=replace(plan.transport, probes=gate_probes(), confirm_s=0.0)), progress)
    snaps = {o.name: o.snapshot for o in outcomes if o.snapshot is not None}
    missing = {o.name: f"{o.status}: {o.reason}" for o in outcomes if o.snapshot is None}
    return gate_fleet(snaps, cfg, missing), outcomes


def gate_payload(result: Any, outcomes: list[NodeOutcome]) -> dict[str, Any]:
    out: dict[str, Any] = result.to_dict()
    out["sweep"] = [o.to_dict() for o in outcomes]
    return out
