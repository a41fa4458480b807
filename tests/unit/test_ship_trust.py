"""The pure tests of tests/live/test_ship_trust_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from vllmdiag.sweep.inventory import parse_inventory
from vllmdiag.sweep.transport import Transport, node_argv

from fleet_fixtures import skip_reason

SYSTEM_PYTHON = Path("/usr/bin/python3")


def _why_skip() -> str | None:
    reason = skip_reason()
    if reason:
        return reason
    if not SYSTEM_PYTHON.exists() or not shutil.which("setpriv") or not shutil.which("bash"):
        return "needs /usr/bin/python3, setpriv and bash"
    return None


pytestmark = [pytest.mark.root, pytest.mark.skipif(_why_skip() is not None, reason=_why_skip() or "")]


def test_ship_python_from_the_inventory_and_the_command_line() -> None:
    inv = parse_inventory({"nodes": {"n1": {"ship_python": "/opt/vllm/bin/python3"}}}, "inv")
    argv = node_argv(Transport(ship=True), "n1", inv, 2.0)
    assert "/opt/vllm/bin/python3" in argv[-1]
    argv = node_argv(Transport(ship=True, ship_python="/usr/bin/python3"), "n1", inv, 2.0)
    assert "/usr/bin/python3" in argv[-1] and "/opt/vllm" not in argv[-1]
    for bad in ("python3", "/x/py thon", "/x;rm -rf /", "-oProxyCommand=x"):
        with pytest.raises(Exception, match="ship.python"):
            Transport(ship=True, ship_python=bad)
        with pytest.raises(Exception, match="ship_python"):
            parse_inventory({"nodes": {"n1": {"ship_python": bad}}}, "inv")
