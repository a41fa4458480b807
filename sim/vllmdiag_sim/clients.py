"""HTTP clients that are part of a simulated deployment (started by faults, killed by `sim down`).

`python -m vllmdiag_sim.clients {load|pending|stalled|schema-load|schema-stuck} PORT [DP_RANK]` (DP_RANK: every
request pinned to that DP rank with vLLM's X-data-parallel-rank header)
- load: back-to-back streaming completions, read to the end (healthy traffic);
- pending: one streaming completion, read for as long as tokens come (a user waiting);
- stalled: one endless streaming completion that is never read, so the server's Send-Q grows;
- schema-load: back-to-back completions with a JSON schema that compiles in about a second;
- schema-stuck: one completion with a deeply nested oneOf schema whose compile never ends (#54003).
"""

from __future__ import annotations

import json
import signal
import socket
import sys
from typing import Any

from vllmdiag_sim import runtime

SCHEMA_LOAD_DEPTH = 2  # xgrammar stand-in: about 1 s to compile (vllmdiag_sim/xgrammar/compiler.py)
SCHEMA_STUCK_DEPTH = 12  # never in a test's lifetime


def nested_schema(depth: int) -> dict[str, Any]:
    """A schema-valid JSON schema with ``depth`` levels of oneOf, the shape that explodes xgrammar's compile."""
    node: dict[str, Any] = {"type": "object", "properties": {"name": {"type": "string"}}}
    for _ in range(depth):
        node = {"oneOf": [{"type": "object", "properties": {"v": node}}, {"type": "string"}]}
    return node


PIN: list[int] = []  # the DP rank every request of this client goes to (X-data-parallel-rank), if any


def request_bytes(port: int, max_tokens: int, schema: dict[str, Any] | None = None) -> bytes:
    req: dict[str, Any] = {"model": "sim", "prompt": "Hello", "max_tokens": max_tokens, "stream": True}
    if schema is not None:  # the OpenAI response_format vLLM turns into structured_outputs.json
        req["response_format"] = {"type": "json_schema", "json_schema": {"name": "out", "schema": schema}}
    body = json.dumps(req).encode()
    pin = "".join(f"X-data-parallel-rank: {r}\r\n" for r in PIN)
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n{pin}"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


def stream(port: int, max_tokens: int, first_token_ack: str | None, schema: dict[str, Any] | None = None) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request_bytes(port, max_tokens, schema))
        while data := sock.recv(65536):
            if first_token_ack and b"data: " in data:
                runtime.ack(first_token_ack)
                first_token_ack = None


def load(port: int) -> None:
    while True:
        stream(port, 32, "client-load")


def pending(port: int) -> None:
    runtime.ack("client-pending")
    stream(port, 16, None)
    signal.pause()


def stalled(port: int) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    # A tiny receive window fills after a few tokens; then the server's Send-Q grows.
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request_bytes(port, 10**9))
    runtime.ack(f"client-stalled-{sock.getsockname()[1]}")
    signal.pause()


def schema_load(port: int) -> None:
    while True:
        stream(port, 8, "client-schema-load", nested_schema(SCHEMA_LOAD_DEPTH))


def schema_stuck(port: int) -> None:
    runtime.ack("client-schema-stuck")
    stream(port, 16, None, nested_schema(SCHEMA_STUCK_DEPTH))
    signal.pause()


def main(argv: list[str]) -> int:
    kind, port = argv[0], int(argv[1])
    PIN.extend(int(a) for a in argv[2:3])
    {"load": load, "pending": pending, "stalled": stalled, "schema-load": schema_load,
     "schema-stuck": schema_stuck}[kind](port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
