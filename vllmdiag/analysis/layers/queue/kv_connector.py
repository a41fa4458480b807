"""Queue layer, disaggregated P/D: a decode instance whose requests wait for KV from its producer (pure).

Real-hang-patterns row 17 (NIXL #53095, #46283, PR #50754; LMCache#4759, #4715): the decode instance
(``kv_role`` kv_consumer) parks each request ``WAITING_FOR_REMOTE_KVS`` until its workers' connector
reports the KV received. When the prefill instance never sends it (dead, wedged, its blocks' lease
expired, a handshake that never completes) every local process looks fine: the EngineCore steps with
nothing to schedule, the workers poll the connector, no token moves. The local engine is not the
culprit, and the producer is another deployment this node cannot see: a warning, never a block.
Facts and file names from vLLM 0.33: ``kv_transfer.py``.
"""

from __future__ import annotations

from typing import Any

from vllmdiag.analysis.facts import Facts
from vllmdiag.analysis.findings import finding
from vllmdiag.analysis.views import kv_transfer
from vllmdiag.analysis.views.deployments import Deployment
from vllmdiag.analysis.views.kv_wait import kv_wait
from vllmdiag.model import Culprit, Finding, Snapshot

LAYER = "queue"
CODES = ("queue.kv_connector", "queue.kv_transfer_waiting")


def analyze(facts: Facts) -> list[Finding]:
    snapshot, deployments = facts.snapshot, facts.deployments
    out: list[Finding] = []
    for dep in deployments:
        kv = dep.kv_transfer
        if not kv:
            continue
        out.append(_connector(snapshot, dep, kv))
        wait = kv_wait(facts, dep)
        if wait is not None:
            out.append(_waiting(snapshot, dep, kv, wait))
    return out


def _role_words(kv: dict[str, Any]) -> str:
    role = kv.get("role") or "no kv_role"
    part = {"kv_consumer": "decode instance", "kv_producer": "prefill instance", "kv_both": "prefill and decode"}
    return f"{kv['connector']}, {role}" + (f" ({part[role]})" if role in part else "")


def _connector(snap: Snapshot, dep: Deployment, kv: dict[str, Any]) -> Finding:
    side = kv.get("side_channel") or {}
    bits = [f"P/D disaggregation: {_role_words(kv)}"]
    if side:
        state = {True: "listening", False: "NOT listening", None: "not checked"}[side.get("listening")]
        bits.append(f"NIXL side channel {side.get('address')} {state}")
    if kv.get("peers"):
        bits.append("remote peers seen: " + ", ".join(kv["peers"]))
    return finding("queue.kv_connector", LAYER, "info", snap, dep, "; ".join(bits) + ".", [],
                   {"connector": kv["connector"], "role": kv.get("role"), "side_channel": side.get("address"),
                    "side_channel_listening": side.get("listening"), "peers": kv.get("peers", []),
                    "extra": kv.get("extra", {}), "env": kv.get("env", {})}, [])


def _waiting(snap: Snapshot, dep: Deployment, kv: dict[str, Any], wait: dict[str, Any]) -> Finding:
    peers = kv.get("peers") or []
    fetch = wait.get("kv_fetch") or {}
    why = (f"vLLM's own gauge counts {fetch.get('waiting_to_start') or 0:.0f} waiting to start and "
           f"{fetch.get('in_progress') or 0:.0f} in progress" if wait["source"] == "kv_fetch gauge" else
           "this vLLM exports no KV-fetch gauge; inferred from the kv_consumer role")
    polling = wait["polling_pids"]
    loop = (f"{'pids' if len(polling) > 1 else 'pid'} {', '.join(map(str, polling))} only "
            f"poll{'' if len(polling) > 1 else 's'} the KV connector (nothing to schedule)" if polling else
            "its engine loop still turns (" + "; ".join(wait["moved"]) + ")" if wait["moved"] else
            "no local process is inside a step")
    lease = kv.get("extra", {}).get("kv_lease_duration")
    nixl = kv_transfer.nixl_words(wait.get("nixl") or {})
    why += f"; {nixl}" if nixl else ""
    msg = (f"{wait['waiting']:.0f} request(s) wait for KV from the prefill side and none runs: no token in "
           f"{wait['window_s']:.1f} s on this decode instance ({_role_words(kv)}; {why}). {loop[:1].upper() + loop[1:]}: "
           "the local EngineCore is waiting, not stuck. The producer is another deployment"
           + (f" (peers seen: {', '.join(peers)})" if peers else " (no peer connection seen from here)")
           + ": triage it too.")
    blame = Culprit(node=peers[0].rsplit(":", 1)[0] if peers else "remote", pid=None, role="kv_producer", rank=None,
                    title=f"KV producer (prefill instance) via {kv['connector']}",
                    reason="never delivered the KV its requests wait for (seen from the decode side only)")
    evidence = {**wait, "connector": kv["connector"], "role": kv.get("role"), "peers": peers,
                "side_channel": (kv.get("side_channel") or {}).get("address") or "-",
                "kv_lease_duration_s": lease if lease is not None else 30, "out_of_view": True}
    return finding("queue.kv_transfer_waiting", LAYER, "warning", snap, dep, msg, [e["pid"] for e in dep.engines],
                   evidence, [blame])
