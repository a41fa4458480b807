"""Next steps of a sweep run with --exec reach the node through the same template, not ssh."""

from __future__ import annotations

from vllmdiag.fleet.steps import via_transport
from vllmdiag.fleet.transport import Transport


def test_exec_template_replaces_on_node_and_ssh_steps() -> None:
    t = Transport(exec_template="kubectl exec -i -n llm %h -c vllm --")
    steps = ["on gpu01: py-spy dump --pid 9", "ssh -o ConnectTimeout=5 gpu03 true", "ssh gpu02 py-spy dump --pid 4",
             "dmesg | grep -i xid"]
    assert via_transport(steps, t) == ["kubectl exec -i -n llm gpu01 -c vllm -- py-spy dump --pid 9",
                                       "kubectl exec -i -n llm gpu03 -c vllm -- true",
                                       "kubectl exec -i -n llm gpu02 -c vllm -- py-spy dump --pid 4",
                                       "dmesg | grep -i xid"]


def test_ssh_sweeps_keep_their_steps() -> None:
    steps = ["on gpu01: py-spy dump --pid 9", "ssh gpu02 true"]
    assert via_transport(steps, Transport()) == steps


def test_template_with_spaces_in_a_path_is_quoted() -> None:
    t = Transport(exec_template="'/opt/my tools/enter' %h --")
    assert via_transport(["on n1: true"], t) == ["'/opt/my tools/enter' n1 -- true"]
