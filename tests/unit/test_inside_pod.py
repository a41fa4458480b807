"""vllmdiag run INSIDE a pod (issue 14 item 5): its own PID + mount namespace, NVML naming host pids.

A real namespace (``unshare --pid --mount --fork --mount-proc``) plays the pod: a private ``/dev``
with ``/dev/nvidia0`` and ``/dev/nvidia1`` (plain files: no GPU here; only the names matter), an
EngineCore orphaned under the pod's init (vLLM #55510) with two titled workers holding those
device nodes, and decoys made with ``ns_last_pid``: worker TP1's pid in the pod IS worker TP0's
host pid, and an unrelated process's pid in the pod IS worker TP1's host pid. vllmdiag then runs
in the namespace (``nsenter``, as ``kubectl exec`` would) with the fake NVML reporting the workers'
HOST pids, as the real driver does (NVIDIA/nvidia-docker#1483). Reading those numbers as local pids
gives GPU0 to TP1 and GPU1 to the unrelated process; the device nodes give the truth.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(90)

# ---- the mapping rules on their own (pure) ------------------------------------------------------
POD_NS = {"self": "pid:[4026532999]", "proc_1": "pid:[4026532999]", "self_nspid": [40]}


def nvml_with(pids: dict[int, list[int]], holders: dict[int, list[int]] | None, ns: Any = POD_NS) -> dict[str, Any]:
    out: dict[str, Any] = {"gpus": [{"index": i, "minor_number": i, "processes": [{"pid": p} for p in ps]}
                                    for i, ps in pids.items()]}
    if ns is not None:
        out["pid_namespace"] = ns
    if holders is not None:
        out["device_fds"] = {"holders": {str(k): v for k, v in holders.items()}, "unreadable_pids": []}
    return out


def test_old_snapshots_and_the_hosts_namespace_read_nvml_pids_as_ours() -> None:
    from vllmdiag.analysis.views.nvml_pids import INIT_PID_NS, pid_map

    procs = [{"pid": 4242, "nspid": [4242, 17]}]
    for ns in (None, {**POD_NS, "proc_1": INIT_PID_NS}):
        assert pid_map(nvml_with({0: [4242]}, None, ns), procs).gpu_of == {4242: 0}
        assert pid_map(nvml_with({0: [17]}, None, ns), procs).gpu_of == {4242: 0}  # through NSpid


def test_an_unreadable_pid_1_falls_back_on_our_own_namespace() -> None:
    from vllmdiag.analysis.views.nvml_pids import INIT_PID_NS, pid_map
    from vllmdiag.probes._gpu_fds import not_the_hosts

    inside = {"self": POD_NS["self"], "proc_1": None, "self_nspid": [40]}  # pid 1 another user's
    assert not_the_hosts(inside) and pid_map(nvml_with({0: [9000]}, {12: [0]}, inside), []).gpu_of == {12: 0}
    host = {"self": INIT_PID_NS, "proc_1": None, "self_nspid": [4000]}
    assert not not_the_hosts(host) and pid_map(nvml_with({0: [4000]}, None, host), []).gpu_of == {4000: 0}


def test_the_probe_and_the_analysis_agree_on_the_hosts_namespace() -> None:
    from vllmdiag.analysis.views import nvml_pids
    from vllmdiag.probes import _gpu_fds

    assert nvml_pids.INIT_PID_NS == _gpu_fds.INIT_PID_NS == f"pid:[{0xEFFFFFFC}]"
    assert os.readlink("/proc/self/ns/pid").startswith("pid:[")


def test_inside_a_pod_numbers_that_are_local_holders_of_their_gpu_are_ours() -> None:
    from vllmdiag.analysis.views.nvml_pids import pid_map

    m = pid_map(nvml_with({0: [12], 1: [13]}, {12: [0, 1], 13: [0, 1]}), [])
    assert m.gpu_of == {12: 0, 13: 1} and m.notes == []  # a driver that translated: every pid checks out
    m = pid_map(nvml_with({0: [12], 1: [9000]}, {12: [0, 1], 13: [0, 1]}), [])
    assert m.gpu_of == {} and m.local_of == {12: None, 9000: None}  # one foreign pid: numbers are not ours


def test_a_sole_holder_of_two_gpus_named_by_two_host_pids_is_neither() -> None:
    from vllmdiag.analysis.views.nvml_pids import pid_map

    m = pid_map(nvml_with({0: [9000], 1: [9001]}, {12: [0, 1]}), [])
    assert m.gpu_of == {} and m.held_by == {0: [12], 1: [12]} and "GPU0: held by local pid(s) 12" in m.notes[0]
    m = pid_map(nvml_with({0: [9000], 1: []}, {12: [0, 1]}), [])
    assert m.gpu_of == {12: 0} and m.local_of == {9000: 12}


def test_a_sole_holder_is_not_sole_when_some_fds_were_unreadable() -> None:
    from vllmdiag.analysis.views.nvml_pids import pid_map

    nvml = nvml_with({0: [9000]}, {12: [0]})
    nvml["device_fds"]["unreadable_pids"] = [13]  # another user's process: it may hold GPU0 as well
    m = pid_map(nvml, [])
    assert m.gpu_of == {} and m.held_by == {0: [12]} and "unreadable" in m.notes[0]


def test_blind_inside_a_pod_attributes_nothing_and_names_the_fix() -> None:
    from vllmdiag.analysis.views.nvml_pids import pid_map

    m = pid_map(nvml_with({0: [9000]}, None), [{"pid": 9000}])  # pid 9000 here is NOT the GPU's
    assert m.mode == "blind" and m.gpu_of == {} and "hostPID: true" in m.notes[0]


def test_gate_does_not_call_unattributable_host_pids_foreign() -> None:
    from vllmdiag.gate.checks.gpu import _ours

    procs = [{"pid": 12}]
    assert _ours(nvml_with({0: [9000]}, {12: [0]}), procs) == {12, 9000}  # host 9000 is our worker 12
    assert _ours(nvml_with({0: [9000]}, {}), procs) == {12}  # held by nobody here: another tenant's
    assert _ours(nvml_with({0: [9000]}, None, None), procs) == {12}  # from the host: as before
