"""The live tests of tests/unit/test_http_netns.py, which says what they check: these start something."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from vllmdiag.api import collect
from vllmdiag.context import Context
from vllmdiag.probes.http import get, netns_get

from ports import free_port

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
                                reason="needs root, unshare and ip (a network namespace)")

SERVER = '''
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"ok" if self.path == "/health" else b"vllm:num_requests_running 0\\nvllm:generation_tokens_total 7\\n"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[2])), H).serve_forever()
'''



def test_api_server_in_another_netns_is_probed_from_inside(tmp_path: Path) -> None:
    script = tmp_path / "vllm"  # `python3 .../vllm serve PORT`: titled like an API server
    script.write_text(SERVER)
    port = free_port()
    p = subprocess.Popen(["unshare", "--net", "sh", "-c", f'ip link set lo up && exec python3 {script} serve {port}'],
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ok, _ = netns_get(Context(), {"netns_pid": p.pid, "host": "127.0.0.1", "port": port}, ["/health"], 1.0)
            if ok and ok.get("status") == 200:
                break
            time.sleep(0.1)
        assert get("127.0.0.1", port, "/health", 0.5)["status"] is None  # not reachable from here
        health, metrics = netns_get(Context(), {"netns_pid": p.pid, "host": "127.0.0.1", "port": port},
                                    ["/health", "/metrics", "/v1/completions"], 2.0)
        assert health and health["status"] == 200 and health["netns"] is True
        assert metrics and metrics["status"] == 200
        snap = collect(probes=["processes", "sockets", "http"], options={"pids": [p.pid]}, budget_s=6, hard=False)
        servers = snap.data("http")["servers"]
        assert servers and servers[0]["same_netns"] is False and servers[0]["health"]["status"] == 200
        assert [m.get("generation_tokens") for m in servers[0]["metrics"]] == [7.0, 7.0]
    finally:
        os.killpg(p.pid, 9)
        p.wait(timeout=10)
