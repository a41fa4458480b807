"""The --subprocesses text parser agrees with py-spy's own JSON, on a real process tree."""

from __future__ import annotations

import json
import os

import pytest

from vllmdiag.probes._pyspy_text import parse_tree_dump
from vllmdiag.probes.stacks import find_py_spy

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or find_py_spy() is None, reason="needs root and py-spy")


def test_parser_edge_cases() -> None:
    text = "\n".join([
        "Process 10: VLLM::Worker_TP0",
        "Python v3.11.7 (/usr/bin/python3.11)",
        "",
        'Thread 10 (active+gil): "MainThread"',
        "    ncclAllReduce (vllm/distributed/device_communicators/pynccl_wrapper.py:312)",
        "    <native frame> (libnccl.so.2)",
        "Thread 0x7F00AA (idle)",
        "    wait (threading.py:320)",
        "garbage line",
    ])
    tree = parse_tree_dump(text)
    main, other = tree[10]
    assert main["name"] == "MainThread" and main["active"] and main["owns_gil"]
    assert main["frames"][0] == ["ncclAllReduce", "vllm/distributed/device_communicators/pynccl_wrapper.py", 312]
    assert main["frames"][1] == ["<native frame>", "libnccl.so.2", None]
    assert other["os_thread_id"] == 0x7F00AA and other["name"] is None and not other["active"]
    assert parse_tree_dump("no process header\n    f (x.py:1)") == {}
    assert json.dumps(tree)  # plain data
