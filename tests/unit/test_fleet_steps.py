"""Next steps of a sweep run with --exec reach the node through the same template, not ssh."""

from __future__ import annotations

from vllmdiag.sweep.node_steps import via_transport
from vllmdiag.sweep.transport import Transport


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


def test_report_confirm_commands_reach_the_node_like_the_sweep_did() -> None:
    from vllmdiag.render.report_data import confirm_commands

    finding = {"code": "gpu.rank_straggler", "layer": "gpu", "severity": "critical", "node": "gpu01", "pids": [12],
               "message": "m", "evidence": {}}
    fleet = {"nodes": [{"name": "gpu01", "status": "ok"}], "exec_template": "kubectl exec -i %h --"}
    cmds = confirm_commands(fleet, finding)
    assert cmds and all(c.startswith("kubectl exec -i gpu01 -- ") for c in cmds if "py-spy" in c), cmds
    assert "kubectl exec -i gpu01 -- py-spy dump --pid 12" in cmds
    over_ssh = confirm_commands({"nodes": fleet["nodes"]}, finding)
    assert "on gpu01: py-spy dump --pid 12" in over_ssh
    assert "py-spy dump --pid 12" in confirm_commands({}, finding)  # one node: run it here
