"""Data parallel across separate `vllm serve` deployments (external / hybrid load balancing, issue 14
item 2): snapshots built as real vLLM 0.33 shows them (an API server per rank, never retitled, with
its `--data-parallel-*` flags; `VLLM::EngineCore_DP<r>` and `VLLM::Worker_DP<r>_TP<t>` below it), and
the simulator's `dp-external` shape live."""

from __future__ import annotations

from typing import Any

from test_shapes import DP_SYNC, ENGINE_IDLE, EXECUTING, IDLE  # one picture of vLLM's stacks

from vllmdiag.analysis.bisect import analyze
from vllmdiag.analysis.contract import second_look_pids
from vllmdiag.analysis.views.deployments import find_deployments
from vllmdiag.analysis.views.dp_worlds import dp_worlds, membership, parse_dp_args
from vllmdiag.model import ProbeResult, Snapshot

API = "/usr/bin/python3 /usr/local/bin/vllm serve deepseek-ai/DeepSeek-V2-Lite -tp 2"
EXTERNAL = "--data-parallel-size 2 --data-parallel-address 10.0.0.5 --data-parallel-rpc-port 13345"


def proc(pid: int, ppid: int, role: str, title: str, ranks: dict[str, int] | None = None) -> dict[str, Any]:
    argv = title.split(" ")
    return {"pid": pid, "ppid": ppid, "pgid": pid if role == "api_server" else ppid, "role": role, "title": title,
            "cmdline": argv, "titled": title.startswith("VLLM::"), "name": title.split("::")[-1], "ranks": ranks or {},
            "state": "S", "comm": argv[0].rsplit("/", 1)[-1][:15]}


def rank_tree(base: int, dp: int, argv: str, tp: int = 2) -> list[dict[str, Any]]:
    """One `vllm serve` of one DP rank: API server, EngineCore_DP<dp>, its TP workers (rank 0 also
    starts the DPCoordinator, vllm/v1/engine/utils.py launch_core_engines)."""
    out = [proc(base, 1, "api_server", f"{API} {argv}"), proc(base + 2, base, "engine_core", f"VLLM::EngineCore_DP{dp}",
                                                                {"dp": dp})]
    if dp == 0:
        out.append(proc(base + 1, base, "dp_coordinator", "VLLM::DPCoordinator"))
    out += [proc(base + 3 + t, base + 2, "worker", f"VLLM::Worker_DP{dp}_TP{t}", {"dp": dp, "tp": t}) for t in range(tp)]
    return out


def snap(procs: list[dict[str, Any]], stacks: dict[int, Any], again: dict[int, Any] | None = None) -> Snapshot:
    dumps = []
    for pid, threads in stacks.items():
        d: dict[str, Any] = {"pid": pid, "status": "ok", "threads": threads}
        if again and pid in again:
            d["resample"] = {"after_s": 0.3, "status": "ok", "threads": again[pid]}
        dumps.append(d)
    return Snapshot("n1", "", "", 0.1, {
        "processes": ProbeResult("ok", 0.0, None, {"processes": procs, "parents": []}),
        "stacks": ProbeResult("ok", 0.1, None, {"dumps": dumps})})


def external(rank1: list[Any], again: dict[int, Any] | None = None, rank1_engine: Any = None) -> Snapshot:
    """Ranks 0 and 1 as two `vllm serve --data-parallel-rank r`; DP0's workers in the DP sync."""
    procs = rank_tree(100, 0, f"{EXTERNAL} --data-parallel-rank 0") + rank_tree(200, 1, f"{EXTERNAL} -dpn=1")
    stacks = {100: [], 101: [], 102: ENGINE_IDLE, 103: DP_SYNC, 104: DP_SYNC, 200: [], 202: rank1_engine or ENGINE_IDLE,
              203: rank1[0], 204: rank1[1]}
    return snap(procs, stacks, again)


def test_dp_flags_are_read_like_vllm_serve_reads_them() -> None:
    args = parse_dp_args(["vllm", "serve", "m", "-dp", "4", "--data-parallel-start-rank=2", "-dpl", "2",
                          "--data-parallel-address", "10.1.2.3", "-dpp", "x", "--data-parallel-rank"])
    assert args == {"size": 4, "start": 2, "local": 2, "address": "10.1.2.3"}  # junk values are ignored
    assert parse_dp_args(["--data-parallel-address", "--port"]) == {}


def test_two_external_ranks_on_one_node_are_one_world() -> None:
    deps = find_deployments(external([IDLE, IDLE]))
    assert len(deps) == 2  # two process trees: nothing but their flags joins them
    (world,) = dp_worlds(deps)
    assert world.key == ("10.0.0.5", 13345, 2)
    assert sorted(r for m in world.members for r in m.ranks) == [0, 1]


def test_internal_lb_is_left_to_the_one_deployment_comparison() -> None:
    procs = [proc(10, 1, "api_server", f"{API} -dp 2"), proc(12, 10, "engine_core", "VLLM::EngineCore_DP0", {"dp": 0}),
             proc(13, 10, "engine_core", "VLLM::EngineCore_DP1", {"dp": 1})]
    assert dp_worlds(find_deployments(snap(procs, {}))) == []


def test_hybrid_and_default_address_members() -> None:
    procs = rank_tree(100, 0, "-dp 4 -dpl 2 -dpr 0") + rank_tree(200, 2, "-dp 4 --data-parallel-size-local 2 -dpr 2")
    members = [membership(d) for d in find_deployments(snap(procs, {}))]
    assert [(m.ranks, m.mode, m.key) for m in members if m] == [
        ([0, 1], "hybrid", ("127.0.0.1", 29550, 4)), ([2, 3], "hybrid", ("127.0.0.1", 29550, 4))]


def test_rank_from_titles_when_flags_are_in_a_config_file() -> None:
    procs = rank_tree(100, 1, "-dp 2 --config dp1.yaml")
    (m,) = [membership(d) for d in find_deployments(snap(procs, {}))]
    assert m is not None and (m.ranks, m.source) == ([1], "titles")


def test_out_of_step_rank_in_the_other_deployment_is_the_culprit_once_it_holds() -> None:
    again = {103: DP_SYNC, 202: ENGINE_IDLE}
    rep = analyze([external([IDLE, IDLE], again)])
    v = rep.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
    assert (v.culprits[0].pid, v.culprits[0].role, v.culprits[0].rank) == (202, "engine_core", 1)
    assert not any(c.pid in (102, 103, 104) for c in v.culprits)  # the waiters are never blamed
    (f, *_) = [f for f in rep.findings if f.code == "gpu.dp_world_out_of_step"]
    assert "n1:200" in f.message and "pid 202" in f.message
    assert {d.verdict.status for d in rep.deployments} == {"blocked"}


def test_one_sample_is_a_warning_and_a_rank_that_moved_on_is_nothing() -> None:
    assert analyze([external([IDLE, IDLE])]).verdict.status == "degraded"
    moved = analyze([external([IDLE, IDLE], {103: IDLE, 202: ENGINE_IDLE})])
    assert moved.verdict.status == "healthy", moved.verdict.summary


def test_busy_worker_of_the_out_of_step_rank_is_named_once_nothing_moved() -> None:
    # A busy rank seen twice 0.3 s apart may be a healthy step's next layer: only a held stall names it.
    snap = external([IDLE, EXECUTING], {103: DP_SYNC, 204: EXECUTING})
    assert not [f for f in analyze([snap]).findings if f.code.startswith("gpu.dp_world")]
    snap.collected_at = "2026-11-30T12:00:00+00:00"
    later = Snapshot.from_dict(snap.to_dict())
    later.collected_at = "2026-11-30T12:00:04+00:00"
    snap.passes = [later]
    v = analyze([snap]).verdict
    assert (v.status, v.layer, v.culprits[0].pid) == ("blocked", "gpu", 204), v.summary


def test_all_ranks_in_the_sync_and_all_idle_are_healthy() -> None:
    assert analyze([external([DP_SYNC, DP_SYNC], {103: DP_SYNC, 203: DP_SYNC})]).verdict.status == "healthy"
    idle = external([IDLE, IDLE])
    for d in idle.data("stacks")["dumps"]:
        if d["pid"] in (103, 104):
            d["threads"] = IDLE
    rep = analyze([idle])
    assert rep.verdict.status == "healthy", rep.verdict.summary
    assert not [f for f in rep.findings if f.code.startswith("gpu.dp_world")]


def test_ranks_on_other_nodes_are_named_unseen_never_healthy_never_blamed() -> None:
    procs = rank_tree(100, 0, "-dp 4 -dpl 2 -dpr 0 -dpa 10.0.0.5", tp=1)
    procs += [proc(110, 100, "engine_core", "VLLM::EngineCore_DP1", {"dp": 1}),
              proc(111, 110, "worker", "VLLM::Worker_DP1", {"dp": 1})]
    stacks = {102: ENGINE_IDLE, 103: IDLE, 110: ENGINE_IDLE, 111: IDLE}
    rep = analyze([snap(procs, stacks)])
    assert rep.verdict.status == "healthy"
    (f,) = [f for f in rep.findings if f.code == "gpu.dp_world_unseen_ranks"]
    assert f.severity == "info" and "DP[2-3]" in f.message and "not judged" in f.message
    stacks = {102: ENGINE_IDLE, 103: DP_SYNC, 110: ENGINE_IDLE, 111: DP_SYNC}
    rep = analyze([snap(procs, stacks)])
    (f,) = [f for f in rep.findings if f.code == "gpu.dp_world_unseen_ranks"]
    assert "wait in the per-step DP sync" in f.message and not f.culprits
    assert rep.verdict.status == "healthy" or not rep.verdict.culprits  # unseen ranks are never blamed


def test_a_split_inside_one_deployment_is_left_to_gpu_groups_but_unseen_ranks_are_said() -> None:
    procs = rank_tree(100, 0, "-dp 4 -dpl 2 -dpr 0 -dpa 10.0.0.5", tp=1)
    procs += [proc(110, 100, "engine_core", "VLLM::EngineCore_DP1", {"dp": 1}),
              proc(111, 110, "worker", "VLLM::Worker_DP1", {"dp": 1})]
    rep = analyze([snap(procs, {102: ENGINE_IDLE, 103: DP_SYNC, 110: ENGINE_IDLE, 111: IDLE}, {103: DP_SYNC})])
    codes = [f.code for f in rep.findings if f.code.startswith("gpu.dp")]
    assert "gpu.dp_out_of_step" in codes and "gpu.dp_world_out_of_step" not in codes
    assert "gpu.dp_world_unseen_ranks" in codes
    assert rep.verdict.culprits[0].pid == 110


def test_second_look_includes_the_waiter_and_the_out_of_step_rank() -> None:
    assert {103, 202} <= set(second_look_pids(external([IDLE, IDLE])))


def test_only_the_chosen_deployment_gets_a_finding_but_sees_the_whole_world() -> None:
    rep = analyze([external([IDLE, IDLE], {103: DP_SYNC, 202: ENGINE_IDLE})], {100})
    assert [d.root_pid for d in rep.deployments] == [100]
    assert rep.verdict.culprits[0].pid == 202


def test_hostile_flags_are_bounded() -> None:
    procs = rank_tree(100, 0, "-dp 99999999 -dpn 0") + rank_tree(200, 1, "-dp 2 -dpn 7 -dpa " + "x" * 300)
    first, second = [membership(d) for d in find_deployments(snap(procs, {}))]
    assert first is None  # no believable size: not a DP world member
    assert second is not None and (second.key, second.ranks, second.source) == (("127.0.0.1", 29550, 2), [1], "titles")


def test_http_probe_gets_only_the_configured_port_of_an_api_server() -> None:
    """Rank 0's API server also listens for the DP group (a TCPStore) and ZMQ on TCP: a GET there is a
    message on a vLLM socket. Only the configured --port (default 8000) is HTTP when it listens."""
    from vllmdiag.probes.http import find_servers

    socks = {"tcp": [{"state": "LISTEN", "local": "0.0.0.0:8000", "pids": [100]},
                     {"state": "LISTEN", "local": "127.0.0.1:29551", "pids": [100]},
                     {"state": "LISTEN", "local": "10.0.0.5:41234", "pids": [100]},
                     {"state": "LISTEN", "local": "0.0.0.0:9000", "pids": [200]}]}
    servers = find_servers(socks, {100, 200}, None, {100: 8000, 200: 8001})
    # 200 does not listen on its configured port (retitled child, --uds, ...): its listeners stay.
    assert sorted(s["port"] for s in servers) == [8000, 9000]


# ---- a DP world over the nodes of a sweep ------------------------------------------------------------
def node_snap(node: str, procs: list[dict[str, Any]], stacks: dict[int, Any], again: dict[int, Any] | None = None
              ) -> Snapshot:
    s = snap(procs, stacks, again)
    s.node = node
    return s


def test_dp_world_over_two_nodes_names_the_out_of_step_rank_and_its_node() -> None:
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet

    flags = "-dp 2 -dpa 10.0.0.5 -dpp 13345"
    a = node_snap("gpu01", rank_tree(100, 0, f"{flags} -dpn 0"), {102: ENGINE_IDLE, 103: DP_SYNC, 104: DP_SYNC},
                  {103: DP_SYNC})
    b = node_snap("gpu02", rank_tree(100, 1, f"{flags} -dpn 1"), {102: ENGINE_IDLE, 103: IDLE, 104: IDLE},
                  {102: ENGINE_IDLE})
    alone = analyze([a]).findings  # one node: the rank it waits for is not there, nobody is blamed
    assert [f.code for f in alone if f.code.startswith("gpu.dp_world")] == ["gpu.dp_world_unseen_ranks"]
    rep = analyze_fleet([a, b])
    v = rep.verdict
    assert (v.status, v.layer) == ("blocked", "gpu"), v.summary
    assert (v.culprits[0].node, v.culprits[0].pid, v.culprits[0].role) == ("gpu02", 102, "engine_core")
    assert not any(f.code == "gpu.dp_world_unseen_ranks" for f in rep.findings)  # the fleet saw every rank


def test_loopback_dp_address_never_joins_nodes() -> None:
    from vllmdiag.analysis.across_nodes.analyze_nodes import analyze_fleet

    a = node_snap("gpu01", rank_tree(100, 0, "-dp 2 -dpn 0"), {102: ENGINE_IDLE, 103: DP_SYNC, 104: DP_SYNC})
    b = node_snap("gpu02", rank_tree(100, 1, "-dp 2 -dpn 1"), {102: ENGINE_IDLE, 103: IDLE, 104: IDLE})
    assert not any(f.code == "fleet.dp_world_out_of_step" for f in analyze_fleet([a, b]).findings)
