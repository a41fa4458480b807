"""The pure tests of tests/live/test_sweep_clush_options_live.py, which says what they check: these start nothing."""

from __future__ import annotations

import pytest

from vllmdiag.errors import BadInput
from vllmdiag.sweep.inventory import parse_inventory
from vllmdiag.sweep.transport import Transport, node_argv


def test_l_and_o_reach_the_ssh_argv_and_win_over_the_inventory() -> None:
    inv = parse_inventory({"nodes": {"n1": {"user": "inv", "ssh_options": ["-oPort=2200"]}}}, "inv")
    argv = node_argv(Transport(user="ops", ssh_options=("Port=2222", "-oProxyJump=bastion", "Compression yes")),
                     "n1", inv, 4.0)
    assert argv[argv.index("-l") + 1] == "ops" and "inv" not in argv
    assert argv.index("-oPort=2222") < argv.index("-oPort=2200")  # ssh keeps the first value: the command line's
    assert "-oProxyJump=bastion" in argv and "-oCompression=yes" in argv
    assert argv.index("-oBatchMode=yes") < argv.index("-oPort=2222")  # never before our hardening
    assert argv[argv.index("--") + 1] == "n1"


@pytest.mark.parametrize("user", ["-oProxyCommand=x", "a b", "root;id", ""])
def test_l_refuses_what_is_not_a_user_name(user: str) -> None:
    with pytest.raises(BadInput):
        Transport(user=user or " ")
