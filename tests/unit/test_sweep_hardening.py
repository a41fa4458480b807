"""The pure tests of tests/live/test_sweep_hardening_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import pytest

from vllmdiag.errors import BadInput
from vllmdiag.sweep.inventory import parse_inventory
from vllmdiag.sweep.transport import Transport, node_argv

FORBIDDEN = ("-oProxyCommand=/tmp/x", "-oproxycommand=/tmp/x", "-oLocalCommand=/tmp/x", "-oPermitLocalCommand=yes",
             "-oInclude=/tmp/x", "-oMatch=all", "-oKnownHostsCommand=/tmp/x", "-oPKCS11Provider=/tmp/x.so",
             "-oRemoteCommand=id", "-oSendEnv=LD_PRELOAD", "-oForwardAgent=yes", "-oLocalForward=1:h:2",
             "-oControlPath=/tmp/s", "-oProxyJump=-oProxyCommand=x")


@pytest.mark.parametrize("option", FORBIDDEN)
def test_inventory_ssh_options_are_allow_listed(option: str) -> None:
    with pytest.raises(BadInput):
        parse_inventory({"nodes": {"n1": {"ssh_options": [option]}}}, "inv")


def test_allowed_ssh_options_come_after_ours() -> None:
    opts = ["-oPort=2222", "-oServerAliveInterval=600", "-oUserKnownHostsFile=/k", "-oProxyJump=bastion"]
    inv = parse_inventory({"nodes": {"n1": {"ssh_options": opts}}}, "inv")
    argv = node_argv(Transport(), "n1", inv, 4.0)
    first_theirs = min(argv.index(o) for o in opts)
    for ours in ("-oBatchMode=yes", "-oForwardAgent=no", "-oClearAllForwardings=yes", "-oServerAliveInterval=5",
                 "-oPermitLocalCommand=no"):
        assert argv.index(ours) < first_theirs  # ssh keeps the first value it sees
