"""A lone rank stuck while its peers idle and the EngineCore waits for a reply (pure).

With async scheduling only the output rank produces the reply; its peers go back to idle in
``dequeue`` once their part of the step is done. If the output rank then stops in a host-side call
(a sync point, a hung kernel launch, any non-vLLM function), nobody is in a collective, so the
straggler rule cannot see it: the EngineCore waits in ``get_response`` with every ring still.
Seen on the real vLLM 0.33 code (tests/data/vllm-real, scenario g). A single stack sample cannot
tell this from a normal step (the output rank is busy there every step), so it takes a second
sample that shows the same place and rings that did not move to suspect a hang, and a hold over
``HELD_S`` (the confirm window) to call it one: on a loaded node a normal step outlasts the 0.3 s
resample (a CPU hog made a stalled client's deployment read "TP0 stays in _model_forward").
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import culprit, finding
from vllmdiag.analysis.views.deployments import Deployment, role_of
from vllmdiag.analysis.views.kv_wait import kv_wait
from vllmdiag.analysis.views.progress import HELD_S
from vllmdiag.analysis.views.second_look_classes import held
from vllmdiag.analysis.views.stack_match import StackClass
from vllmdiag.model import Finding, Snapshot
from vllmdiag.vocab.stack_classes import COLLECTIVE, ENGINE_WAITING_WORKERS, IDLE, KV_TRANSFER

LAYER = "gpu"
CODES = ("gpu.rank_stuck_alone",)
ENGINE_WAITS = (ENGINE_WAITING_WORKERS,)
NOT_BUSY = (IDLE, COLLECTIVE)  # a rank in a collective has its own rule (straggler)


def lone_rank(procs: list[dict[str, Any]], classes: dict[int, StackClass]) -> dict[str, Any] | None:
    """The single busy worker while every other worker idles and every EngineCore waits on workers."""
    engines = [p for p in procs if role_of(p) == "engine_core" and p.get("state") not in ("Z", "X")]
    workers = [p for p in procs if role_of(p) == "worker" and p.get("state") not in ("Z", "X")]
    if not engines or len(workers) < 2:
        return None
    if not all((c := classes.get(e["pid"])) is not None and c.name in ENGINE_WAITS for e in engines):
        return None
    busy = [w for w in workers if (c := classes.get(w["pid"])) is not None and c.name not in NOT_BUSY]
    idle = [w for w in workers if (c := classes.get(w["pid"])) is not None and c.name == IDLE]
    return busy[0] if len(busy) == 1 and len(idle) == len(workers) - 1 else None


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    classes = facts.classes
    again = facts.again
    out = []
    for dep in deployments:
        rank = lone_rank(dep.processes, classes)
        if rank is None:
            continue
        first = classes[rank["pid"]]
        still = rings_still(snapshot, dep)
        if held(rank["pid"], first, again) is not True or still is False:
            continue  # moved on, or never looked at twice: a normal step caught in passing
        if first.name == KV_TRANSFER and rank["pid"] in ((kv_wait(facts, dep) or {}).get("polling_pids") or []):
            # A P/D decode instance waiting for its producer's KV: its rank polls the connector, and the
            # queue layer names the wait (seen under a loaded CI run: called a stuck rank instead).
            continue
        window = facts.progress(dep).window_s
        confirmed = window >= HELD_S
        blame = culprit(snapshot, rank, f"{first.label} in {first.place} while its peers idle and the "
                                        "EngineCore waits for its reply")
        doubt = "" if confirmed else (f"; seen for only {window:.1f} s (a hold is called a block after {HELD_S:.0f} s: "
                                      "a slow step on a loaded node lasts longer than one resample; triage --confirm S)")
        out.append(finding("gpu.rank_stuck_alone", LAYER, "critical" if still and confirmed else "warning", snapshot, dep,
                           f"{blame.title} stays in {first.label} at {first.place} while the other workers idle and "
                           "the EngineCore waits for a reply" + (" (rings did not move)" if still else "") + doubt + ".",
                           [rank["pid"]], {"class": first.label, "where": first.where, "place": first.place,
                                           "key_frames": first.key_frames, "thread": first.thread,
                                           "rings_still": still, "window_s": round(window, 2),
                                           "needs_confirm": not confirmed}, [blame]))
    return out


def rings_still(snapshot: Snapshot, dep: Deployment) -> bool | None:
    """True when every sampled ring of the deployment stayed still; None when nothing was sampled."""
    rings = [r for r in snapshot.data("rings").get("rings", []) if set(r.get("mapped_by", [])) & dep.pids
             and int(r.get("sample_count") or 0) >= 2]
    if not rings:
        return None
    return not any(r.get("moved") for r in rings)


def second_look_pids(facts: Facts) -> list[int]:
    """The analyzer contract's second-look hook (analysis/contract.py): each deployment's lone busy rank."""
    ranks = (lone_rank(dep.processes, facts.classes) for dep in facts.deployments)
    return sorted({rank["pid"] for rank in ranks if rank})
