"""The gate's `gate_url` probe: /health, /metrics, /v1/models and one one-token completion, each bounded.

vLLM's /health does not probe workers (it answers 200 during a NCCL hang until the 300 s RPC
timeout kills the engine), so only a completion that comes back proves the workers answer.
stdlib http.client only: the node-side path must not need more than vLLM's own environment.
"""

from __future__ import annotations

import http.client
import json
import math
import re
import time
from typing import Any
from urllib.parse import urlsplit

from vllmdiag.context import Context
from vllmdiag.probe import ProbeSpec, Skip

MAX_BODY = 1 << 20
_METRIC = re.compile(r"^(vllm:num_requests_(?:running|waiting))(?:\{[^}]*\})?\s+([0-9.eE+-]+)\s*$", re.M)


def spec(health_timeout_s: float, completion_deadline_s: float) -> ProbeSpec:
    # Three bounded GETs plus the completion, and a little slack so our own deadlines fire first.
    return ProbeSpec(name="gate_url", layer="client", description="HTTP /health, /metrics and a one-token completion",
                     timeout_s=min(120.0, 3 * health_timeout_s + completion_deadline_s + 1.0))


def collect(ctx: Context) -> dict[str, Any]:
    url = ctx.options.gate_url
    if not url:
        raise Skip("no --url given")
    short = float(ctx.options.gate_health_timeout_s)
    health = call(url, "GET", "/health", None, short)
    metrics = call(url, "GET", "/metrics", None, short)
    metrics["counts"] = parse_metrics(metrics.pop("body", ""))
    if "dropped" in metrics["counts"]:  # kept beside the numbers, which stay numbers
        metrics["dropped"] = metrics["counts"].pop("dropped")
    model = ctx.options.gate_model
    models: dict[str, Any] = {}
    if not model:
        models = call(url, "GET", "/v1/models", None, short)
        model = first_model(models.pop("body", ""))
    payload = {"model": model, "prompt": "ping", "max_tokens": 1, "temperature": 0, "stream": False}
    completion: dict[str, Any] = {"skipped": "no model name (set url.model in the gate config)"}
    if model:
        deadline = float(ctx.options.gate_completion_deadline_s)
        completion = call(url, "POST", "/v1/completions", payload, deadline)
        completion["choices"] = count_choices(completion.pop("body", ""))
        completion["deadline_s"] = deadline
    models.pop("body", None)
    return {"url": url, "model": model, "health": _strip(health), "metrics": metrics, "models": models,
            "completion": completion}


def call(base: str, method: str, path: str, payload: dict[str, Any] | None, timeout_s: float) -> dict[str, Any]:
    """One HTTP request whose whole exchange (connect, send, every read) ends by timeout_s."""
    parts = urlsplit(base)
    start = time.monotonic()
    deadline = start + timeout_s
    out: dict[str, Any] = {"path": path, "status_code": None, "error": None, "timed_out": False}
    conn_cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(parts.hostname or "127.0.0.1", parts.port, timeout=timeout_s)
    try:
        body = json.dumps(payload).encode() if payload is not None else None
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, parts.path.rstrip("/") + path, body=body, headers=headers)
        _remaining(conn, deadline)
        resp = conn.getresponse()
        out["status_code"] = resp.status
        chunks: list[bytes] = []
        size = 0
        while size < MAX_BODY:
            _remaining(conn, deadline)
            chunk = resp.read1(65536)
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        out["body"] = b"".join(chunks).decode("utf-8", "replace")
    except TimeoutError:
        out.update(timed_out=True, error=f"no answer within {timeout_s:g} s")
    except (OSError, http.client.HTTPException) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        conn.close()
    out["duration_s"] = round(time.monotonic() - start, 4)
    return out


def _remaining(conn: http.client.HTTPConnection, deadline: float) -> None:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    if conn.sock is not None:
        conn.sock.settimeout(left)


def parse_metrics(text: str) -> dict[str, Any]:
    """Request gauges summed over engines; a value that is not finite or is negative (an untrusted
    body's ``NaN``, ``1e400``, ``-1``) is dropped and named under ``dropped``."""
    counts: dict[str, Any] = {}
    dropped: list[str] = []
    for name, raw in _METRIC.findall(text or ""):
        key = name.removeprefix("vllm:")
        try:
            value = float(raw)
        except ValueError:
            continue
        total = counts.get(key, 0.0) + value
        if not (math.isfinite(value) and value >= 0 and math.isfinite(total)):
            dropped.append(f"{name} {raw[:24]}")
            continue
        counts[key] = total
    if dropped:
        counts["dropped"] = dropped[:5]
    return counts


def first_model(body: str) -> str | None:
    try:
        data = json.loads(body or "null")
        model = data["data"][0]["id"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    return model if isinstance(model, str) else None


def count_choices(body: str) -> int | None:
    try:
        choices = json.loads(body or "null")["choices"]
    except (ValueError, KeyError, TypeError):
        return None
    return len(choices) if isinstance(choices, list) else None


def _strip(row: dict[str, Any]) -> dict[str, Any]:
    body = row.pop("body", None)
    if body and row.get("status_code") != 200:
        row["body_head"] = body[:200]
    return row
