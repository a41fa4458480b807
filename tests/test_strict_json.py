"""Strict JSON (issue 25 item 7): hostile NaN and 1e400 never come out as NaN or Infinity, in --json,
in a saved snapshot, or in the webhook's body (jq, Go and JavaScript reject them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

from vllmdiag.model import strict_json
from vllmdiag.watch import hooks

ROOT = Path(__file__).resolve().parent.parent


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise ValueError(f"not strict JSON: {name}")

    return json.loads(text, parse_constant=refuse)


def test_dumps_writes_null_for_what_is_not_finite() -> None:
    doc = {"a": float("nan"), "b": [1.0, float("inf"), {"c": -float("inf")}], "d": 2.5}
    assert _strict(strict_json.dumps(doc)) == {"a": None, "b": [1.0, None, {"c": None}], "d": 2.5}


def test_analyze_json_of_a_snapshot_with_nan_and_overflow_is_strict(tmp_path: Path, reliability: Any) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    snap = json.loads(subprocess.run([sys.executable, "-m", "vllmdiag", "collect", "--json", "--probe", "host"],
                                     capture_output=True, text=True, timeout=120, env=env, check=True).stdout)
    snap["probes"]["host"]["data"]["hostile"] = {"nan": float("nan"), "big": float("inf"), "list": [float("-inf")]}
    snap["probes"]["host"]["duration_s"] = float("nan")
    path = tmp_path / "snap.json"
    path.write_text(json.dumps(snap))  # NaN, Infinity: what a hostile or old file may hold
    out = subprocess.run([sys.executable, "-m", "vllmdiag", "analyze", str(path), "--json"], capture_output=True,
                         text=True, timeout=120, env=env)
    reliability.case(traceback="Traceback" in out.stderr)
    assert out.stdout, out.stderr
    _strict(out.stdout)


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
