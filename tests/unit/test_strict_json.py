"""Strict JSON (issue 25 item 7): hostile NaN and 1e400 never come out as NaN or Infinity, in --json,
in a saved snapshot, or in the webhook's body (jq, Go and JavaScript reject them)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from vllmdiag.model import strict_json
from vllmdiag.watch import hooks


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_dumps_writes_null_for_what_is_not_finite() -> None:
    doc = {"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}], "d": 2.5}
    assert _strict(strict_json.dumps(doc)) == {"a": None, "b": [1.0, None, {"c": None}], "d": 2.5}


def test_the_webhook_body_is_strict_json() -> None:
    got: list[bytes] = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            got.append(self.rfile.read(int(self.headers["Content-Length"])))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return

    srv = HTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.handle_request, daemon=True)
    t.start()
    try:
        hooks.post_json(f"http://127.0.0.1:{srv.server_address[1]}/hook", {"v": float("nan"), "w": 1e400}, 5)
        t.join(10)
    finally:
        srv.server_close()
    assert got and _strict(got[0].decode()) == {"v": None, "w": None}
