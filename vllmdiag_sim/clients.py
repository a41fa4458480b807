"""HTTP clients that are part of a simulated deployment (started by faults, killed by `sim down`).

`python -m vllmdiag_sim.clients {load|pending|stalled} PORT`
- load: back-to-back streaming completions, read to the end (healthy traffic);
- pending: one streaming completion, read for as long as tokens come (a user waiting);
- stalled: one endless streaming completion that is never read, so the server's Send-Q grows.
"""

from __future__ import annotations

import json
import signal
import socket
import sys

from vllmdiag_sim import runtime


def request_bytes(port: int, max_tokens: int) -> bytes:
    body = json.dumps({"model": "sim", "prompt": "Hello", "max_tokens": max_tokens, "stream": True}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


def stream(port: int, max_tokens: int, first_token_ack: str | None) -> None:
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(request_bytes(port, max_tokens))
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


def main(argv: list[str]) -> int:
    kind, port = argv[0], int(argv[1])
    {"load": load, "pending": pending, "stalled": stalled}[kind](port)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
