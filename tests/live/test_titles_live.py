"""The live tests of tests/unit/test_titles.py, which says what they check: these start something."""

from __future__ import annotations

import pytest

from vllmdiag.vocab.titles import parse_cmdline


@pytest.mark.parametrize("argv,role,ranks", [
    (["VLLM::EngineCore"], "engine_core", {}),
    (["VLLM::EngineCore_DP1"], "engine_core", {"dp": 1}),
    (["VLLM::EngineCore_0"], "engine_core", {"dp": 0}),  # mid-2025 naming
    (["VLLM::Worker_TP3"], "worker", {"tp": 3}),
    (["VLLM::Worker_DP0_TP1_EP1"], "worker", {"dp": 0, "tp": 1, "ep": 1}),
    (["VLLM::Worker_PP1_TP0"], "worker", {"pp": 1, "tp": 0}),
    (["VLLM::Worker_DP2_PP1_PCP1_TP7_DCP3_EP23"], "worker", {"dp": 2, "pp": 1, "pcp": 1, "tp": 7, "dcp": 3, "ep": 23}),
    (["VLLM::Worker"], "worker", {}),  # inside init_device, not yet ranked
    (["VLLM::DPCoordinator"], "dp_coordinator", {}),
    (["VLLM::APIServer_0"], "api_server_child", {"api": 0}),
    (["VLLM::APIServer_DP3"], "api_server_child", {"dp": 3}),
    (["VLLM::Worker_TP2" + " " * 40], "worker", {"tp": 2}),  # space padding
    (["/usr/bin/python3", "/usr/local/bin/vllm", "serve", "meta-llama/Llama-3-8B", "-tp", "8"], "api_server", {}),
    (["vllm", "serve", "m"], "api_server", {}),
    (["python", "-m", "vllm.entrypoints.openai.api_server", "--model", "m"], "api_server", {}),
    (["timeout", "20", "python", "/x/vllm", "serve", "m"], None, {}),
    (["python", "-m", "vllm.entrypoints.cli.main", "serve", "m"], "api_server", {}),
    (["python", "-m", "vllm.entrypoints.cli.main", "bench", "latency", "--model", "m"], None, {}),  # LLM() inside
    (["vllm", "bench", "throughput", "--model", "m"], None, {}),
    (["python", "-c", "from multiprocessing.resource_tracker import main;main(13)"], "resource_tracker", {}),
    (["python", "-c", "from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)",
      "--multiprocessing-fork"], "spawn_child", {}),
    (["python", "-c", "from multiprocessing.spawn import spawn_main", "--multiprocessing-fork_TP0"], "worker", {"tp": 0}),
    (["bash"], None, {}),
    ([], None, {}),
])
def test_parse(argv: list[str], role: str | None, ranks: dict[str, int]) -> None:
    info = parse_cmdline(argv)
    assert info.role == role
    assert info.ranks == ranks
