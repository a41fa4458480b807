"""HTTP of an API server inside another network namespace (a container's): read-only GETs from a
short-lived child that joins the target's netns; from the host the port is unreachable."""

from __future__ import annotations

import os
import shutil

import pytest

from vllmdiag.context import Context
from vllmdiag.probes.http import netns_get

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare") or not shutil.which("ip"),
                                reason="needs root, unshare and ip (a network namespace)")


def test_netns_get_of_a_gone_process_says_why() -> None:
    health, metrics = netns_get(Context(), {"netns_pid": 2 ** 22 + 12345, "host": "127.0.0.1", "port": 1}, ["/health"], 0.5)
    assert health is not None and health["status"] is None and "setns" in health["error"] and metrics is None
