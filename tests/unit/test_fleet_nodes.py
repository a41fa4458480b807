"""Node sets, inventory, argv building, and hostile input rejected before anything runs."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from vllmdiag.errors import BadInput
from vllmdiag.sweep.inventory import parse_inventory
from vllmdiag.sweep.nodes import resolve_nodes
from vllmdiag.sweep.outcome import classify
from vllmdiag.sweep.transport import SHIP_SNIPPET, Transport, node_argv

HOSTILE = ["gpu1;rm -rf /", "gpu$(id)", "gpu`id`", "-oProxyCommand=touch", "gpu 1", "gpu1\nid", "a|b", "a>b",
           "gpu1&", "../etc", "a'b", 'a"b', "a\\b", "gpu1\x00"]


def test_nodeset_syntax_and_groups() -> None:
    inv = parse_inventory({"groups": {"gpu": "gpu[00-03]", "spare": "sp[1-2]"}}, "inv")
    assert resolve_nodes(["gpu[00-47]"]) == [f"gpu{i:02d}" for i in range(48)]
    assert resolve_nodes(["@gpu", "x1"], inventory=inv) == ["gpu00", "gpu01", "gpu02", "gpu03", "x1"]
    assert len(resolve_nodes([], inventory=inv)) == 6  # no node set: every group of the inventory


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_names_rejected(name: str) -> None:
    with pytest.raises(BadInput) as err:
        resolve_nodes([name])
    assert "\n" not in str(err.value)


def test_hostfile(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# fleet\nn[1-3]\n\nn9  # spare\n")
    assert resolve_nodes([], hostfile) == ["n1", "n2", "n3", "n9"]
    hostfile.write_text("n1\nn2;reboot\n")
    with pytest.raises(BadInput):
        resolve_nodes([], hostfile)


def test_too_many_nodes() -> None:
    for text in ("n[0-99999999]", "a[0-9999]b[0-9999]", "x,n[1-3],[0-200000]"):
        with pytest.raises(BadInput, match="too large"):
            resolve_nodes([text])


@pytest.mark.parametrize("raw", [
    {"nodes": {"n1": {"address": "1.2.3.4;id"}}}, {"nodes": {"n1": {"port": "22; id"}}},
    {"nodes": {"n1": {"ssh_options": ["-oProxyCommand=sh -c id"]}}}, {"defaults": {"bogus": 1}},
    {"nodes": {"n1": {"identity_file": "-oProxyCommand=x"}}}, {"groups": {"g": ["n1"]}}, "not a mapping",
    {"nodes": {"n1;id": {}}},
])
def test_bad_inventory(raw: object) -> None:
    with pytest.raises(BadInput):
        parse_inventory(raw, "inv")


def test_ssh_argv_is_a_list_with_safe_defaults() -> None:
    inv = parse_inventory({"defaults": {"user": "root", "strict_host_key_checking": "accept-new"},
                           "nodes": {"gpu[01-02]": {"address": "10.0.0.7", "port": 2222, "identity_file": "/k"}}}, "inv")
    argv = node_argv(Transport(connect_timeout_s=3), "gpu01", inv, 4.0)
    assert argv[0] == "ssh" and "-oBatchMode=yes" in argv and "-oConnectTimeout=3" in argv
    assert argv.index("-oBatchMode=yes") < argv.index("-oStrictHostKeyChecking=accept-new")
    assert argv[-3:-1] == ["--", "10.0.0.7"] and argv[argv.index("-p"):argv.index("-p") + 2] == ["-p", "2222"]
    assert shlex.split(argv[-1]) == ["vllmdiag", "collect", "--json", "--node", "gpu01", "--budget", "4.0"]


def test_exec_template_and_ship() -> None:
    argv = node_argv(Transport(exec_template="kubectl exec -n llm %h --", ship=True), "pod-7", None, 2.0)
    assert argv[:5] == ["kubectl", "exec", "-n", "llm", "pod-7"]
    assert argv[5:9] == ["--", "sh", "-c", SHIP_SNIPPET]
    assert "pod-7" not in SHIP_SNIPPET and argv[-4:] == ["--node", "pod-7", "--budget", "2.0"]
    with pytest.raises(BadInput, match="%h"):
        Transport(exec_template="kubectl exec --")


def test_outcome_classification() -> None:
    def c(rc: int | None, err: bytes = b"", out: bytes = b"", timed_out: bool = False) -> tuple[str, str | None]:
        o = classify("n1", rc=rc, timed_out=timed_out, stdout=[out], stderr=[err], duration_s=0.1, plan_timeout_s=5,
                     transport="ssh")
        return o.status, o.reason

    assert c(255, b"ssh: connect to host 10.0.0.1 port 22: Connection refused")[0] == "unreachable"
    assert c(255, b"root@n1: Permission denied (publickey).") == ("error", "ssh authentication failed: root@n1: "
                                                                          "Permission denied (publickey).")
    assert c(None, timed_out=True)[0] == "timeout"
    assert c(127, b"sh: vllmdiag: not found")[0] == "error"
    assert c(0, out=b"Welcome!\n{not json")[1].startswith("garbled output")  # type: ignore[union-attr]
    assert c(0, out=b'{"schema_version": 99}')[0] == "error"
