"""Disaggregated prefill/decode (P/D): the KV connector a deployment declares, and whether its requests
wait for KV that another deployment must send (pure; used by deployments.py, queue_kv.py and client.py).

What vLLM 0.33 does (read from the 0.33.0 wheel):
- A deployment declares a connector with ``--kv-transfer-config '{"kv_connector": "NixlConnector",
  "kv_role": "kv_consumer"}'`` (``vllm/config/kv_transfer.py`` ``KVTransferConfig``: ``kv_connector``,
  ``kv_role`` in kv_producer | kv_consumer | kv_both, ``engine_id``, ``kv_port``, ``kv_connector_extra_config``;
  ``vllm/engine/arg_utils.py`` adds the flag, which also takes dotted keys ``--kv-transfer-config.kv_role``).
  ``is_kv_consumer`` is kv_consumer or kv_both: the decode side.
- NIXL's handshake side channel is a ZMQ ROUTER that the EngineCore's scheduler-side connector binds on
  ``tcp://VLLM_NIXL_SIDE_CHANNEL_HOST:VLLM_NIXL_SIDE_CHANNEL_PORT + data_parallel_index`` (defaults
  localhost:5600, ``vllm/envs.py``) in a thread named ``nixl_handshake_listener``
  (``kv_connector/v1/nixl/base_scheduler.py`` ``set_xfer_handshake_metadata``). The decode side's workers
  dial the prefill side's channel from ``vllm-nixl-handshake-initiator`` threads (``base_worker.py``
  ``_nixl_handshake``); the KV itself moves over NIXL/UCX, not over any socket we read.
- A request whose KV comes from a producer is parked ``RequestStatus.WAITING_FOR_REMOTE_KVS``
  (``vllm/v1/request.py``; ``scheduler.py`` sets it where ``load_kv_async``) and only runs once the
  workers' ``get_finished`` reports it in ``finished_recving``. Meanwhile the EngineCore keeps stepping
  with 0 scheduled tokens (every worker runs ``kv_connector_no_forward``) and sleeps 1 ms between steps
  (``vllm/v1/engine/core.py`` ``_process_engine_step``): the rings and stacks move, no token does.
- /metrics (``vllm/v1/metrics/loggers.py``): ``vllm:num_requests_waiting`` counts those requests (as
  ``vllm:num_requests_waiting_by_reason{reason="deferred"}``) and, on a consumer only,
  ``vllm:num_requests_kv_fetch_by_stage{stage="waiting_to_start"|"in_progress"|"completed_waiting"}``.
- NIXL's lease: ``kv_connector_extra_config.kv_lease_duration`` (default 30 s; the decode side renews it
  by heartbeat every lease/6 s, ``base_scheduler.py``); P frees blocks D never read after it.
"""

from __future__ import annotations

import json
from typing import Any

FLAG = "--kv-transfer-config"
CONSUMER_ROLES = ("kv_consumer", "kv_both")
ROLES = ("kv_producer", *CONSUMER_ROLES)
NIXL_PORT_DEFAULT = 5600
MIN_GAP_S = 0.15  # two /metrics samples closer than this prove nothing (client.py uses the same)
_EXTRA_KEYS = ("kv_lease_duration", "kv_recompute_threshold", "decoder_kv_blocks_ttl", "bidirectional_kv_xfer")
_ENV_KEYS = ("VLLM_NIXL_SIDE_CHANNEL_HOST", "VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_MOONCAKE_BOOTSTRAP_PORT",
             "VLLM_MOONCAKE_CONNECTOR_TIMEOUT", "LMCACHE_CONFIG_FILE", "LMCACHE_REMOTE_URL")


def parse_config(argv: list[str]) -> dict[str, Any] | None:
    """The connector settings on a `vllm serve` command line (JSON value or dotted keys); None without any.
    Untrusted text: only short strings and numbers of known keys come out."""
    raw: dict[str, Any] = {}
    for i, arg in enumerate(argv):
        name, eq, inline = arg.partition("=")
        value = inline if eq else (argv[i + 1] if i + 1 < len(argv) else "")
        if name == FLAG:
            try:
                loaded = json.loads(value[:8192])
            except ValueError:
                continue
            if isinstance(loaded, dict):
                raw.update(loaded)
        elif name.startswith(FLAG + "."):
            raw[name[len(FLAG) + 1:]] = value
    connector, role = _word(raw.get("kv_connector")), _word(raw.get("kv_role"))
    if connector is None:
        return None
    extra = raw.get("kv_connector_extra_config")
    extra = extra if isinstance(extra, dict) else {}
    return {"connector": connector, "role": role if role in ROLES else None, "engine_id": _word(raw.get("engine_id")),
            "extra": {k: v for k in _EXTRA_KEYS if isinstance(v := extra.get(k), (int, float, bool))}}


def _word(value: Any) -> str | None:
    return value[:80] if isinstance(value, str) and value and value.isprintable() else None


def describe(snapshot: Any, dep: Any) -> dict[str, Any]:
    """``dep.kv_transfer``: connector, role, side channel (NIXL), the settings env, peers seen; {} if none."""
    root = dep.by_pid(dep.root_pid) or {}
    cfg = parse_config([str(a) for a in root.get("cmdline") or []])
    if cfg is None:
        return {}
    env = {k: str(v)[:120] for p in (root, *dep.engines) for k, v in (p.get("environ") or {}).items()
           if k in _ENV_KEYS or k.startswith("VLLM_NIXL_")}
    tcp = [t for t in snapshot.data("sockets").get("tcp") or [] if isinstance(t, dict)]
    out: dict[str, Any] = {**cfg, "env": dict(sorted(env.items())[:16]), "peers": peers(tcp, dep.pids)}
    if "nixl" in cfg["connector"].lower():
        out["side_channel"] = _side_channel(env, tcp, dep)
    return out


def _side_channel(env: dict[str, str], tcp: list[dict[str, Any]], dep: Any) -> dict[str, Any]:
    host = env.get("VLLM_NIXL_SIDE_CHANNEL_HOST", "localhost")
    port_text = env.get("VLLM_NIXL_SIDE_CHANNEL_PORT", str(NIXL_PORT_DEFAULT))
    port = int(port_text) if port_text.isdigit() else NIXL_PORT_DEFAULT
    engines = {e["pid"] for e in dep.engines}
    listening = [t for t in tcp if t.get("state") == "LISTEN" and set(t.get("pids") or []) & engines
                 and str(t.get("local", "")).rsplit(":", 1)[-1] == str(port)]
    # Without a sockets table we cannot say it is missing: None, not False.
    return {"address": f"{host}:{port}", "listening": bool(listening) if tcp else None}


def peers(tcp: list[dict[str, Any]], pids: set[int]) -> list[str]:
    """Addresses the deployment dialled that none of its own processes owns: with a connector, its KV
    peers (NIXL/UCX, Mooncake, an LMCache server) are among them. Accepted connections (HTTP clients,
    on a port the deployment listens on) are not."""
    ours = {str(t.get("local")) for t in tcp if set(t.get("pids") or []) & pids}
    ports = {str(t.get("local", "")).rsplit(":", 1)[-1] for t in tcp
             if t.get("state") == "LISTEN" and set(t.get("pids") or []) & pids}
    out = {str(t.get("remote")) for t in tcp if t.get("state") == "ESTABLISHED" and set(t.get("pids") or []) & pids
           and str(t.get("remote")) not in ours and str(t.get("local", "")).rsplit(":", 1)[-1] not in ports}
    return sorted(out)[:8]


def is_consumer(dep: Any) -> bool:
    return (getattr(dep, "kv_transfer", None) or {}).get("role") in CONSUMER_ROLES


def waiting_for_kv(samples: list[dict[str, Any]], gap_s: float, role: str | None) -> dict[str, Any] | None:
    """Evidence that requests wait for remote KV, from /metrics samples (oldest first, every pass): some
    wait in both the first and the last, none runs, no token or prompt counter moved, over at least
    ``MIN_GAP_S``; and vLLM's KV-fetch gauge counts them (or, where it is not exported, the instance is a
    pure kv_consumer). None when that is not what the samples say."""
    if len(samples) < 2 or gap_s < MIN_GAP_S:
        return None
    first, last = samples[0], samples[-1]
    if any(not isinstance(m.get(k), (int, float)) for m in (first, last) for k in ("running", "waiting")):
        return None
    moved = any(first.get(k) != last.get(k) for k in ("generation_tokens", "prompt_tokens"))
    if moved or first["running"] or last["running"] or not (first["waiting"] and last["waiting"]):
        return None
    stages = {k: last.get(f"kv_fetch_{k}") for k in ("waiting_to_start", "in_progress", "completed_waiting")}
    fetching = sum(v for k, v in stages.items() if k != "completed_waiting" and isinstance(v, (int, float)))
    gauge = any(isinstance(v, (int, float)) for v in stages.values())
    if (gauge and not fetching) or (not gauge and role != "kv_consumer"):
        return None  # they wait for something else (capacity), or the role alone cannot say (kv_both)
    nixl = {k: [first.get(k), last.get(k)] for k in ("kv_transfers", "kv_failed_transfers", "kv_expired_requests")
            if isinstance(last.get(k), (int, float))}
    return {"waiting": last["waiting"], "kv_fetch": stages if gauge else None, "gap_s": round(gap_s, 2),
            "waiting_deferred": last.get("waiting_deferred"), "source": "kv_fetch gauge" if gauge else "kv_role",
            "nixl": nixl}


def nixl_words(nixl: dict[str, list[Any]]) -> str:
    """NIXL's own counters over the window, for the message ("" when the server exports none)."""
    names = {"kv_transfers": "completed transfers", "kv_failed_transfers": "failed transfers",
             "kv_expired_requests": "requests whose KV lease expired"}
    parts = [f"{names[k]} {a:.0f} -> {b:.0f}" if isinstance(a, (int, float)) and a != b else f"{names[k]} {b:.0f}"
             for k, (a, b) in nixl.items()]
    return "NIXL counts " + ", ".join(parts) if parts else ""
