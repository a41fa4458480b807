"""Mirror of `vllm/entrypoints/cli/main.py`: the `vllm serve` command line."""

from __future__ import annotations

import argparse
import json
import logging

from vllmdiag_sim.vllm.config.parallel import ParallelConfig


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="vllm")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve")
    serve.add_argument("model")
    serve.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    serve.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    serve.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    serve.add_argument("--enable-expert-parallel", "-ep", action="store_true")
    serve.add_argument("--all2all-backend", choices=("deepep_high_throughput",), default=None,
                       help="the sim's EP all2all is DeepEP high-throughput only")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--headless", action="store_true")
    serve.add_argument("--nnodes", type=int, default=1)
    serve.add_argument("--node-rank", type=int, default=0)
    serve.add_argument("--master-port", type=int, default=0)
    serve.add_argument("--distributed-executor-backend", choices=("mp", "ray"), default="mp")
    # External DP load balancing (vLLM 0.33 arg_utils.py): one `vllm serve` per DP rank.
    serve.add_argument("--data-parallel-rank", "-dpn", type=int, default=None)
    serve.add_argument("--data-parallel-address", "-dpa", default="127.0.0.1")
    serve.add_argument("--data-parallel-rpc-port", "-dpp", type=int, default=29550)
    # Disaggregated P/D (vLLM 0.33 vllm/config/kv_transfer.py KVTransferConfig, as JSON)
    serve.add_argument("--kv-transfer-config", type=json.loads, default=None)
    # vLLM 0.32 arg_utils: None means the DP size (one API server per DP rank); above 1, `vllm serve` is a
    # manager only (run_multi_api_server) and VLLM::APIServer_N processes serve HTTP on one shared socket.
    serve.add_argument("--api-server-count", "-asc", type=int, default=None)
    return parser.parse_args(argv)


def api_server_count(args: argparse.Namespace) -> int:
    if args.api_server_count is not None:
        return max(1, int(args.api_server_count))
    # External DP LB runs one API server per `vllm serve` (its own rank's); else one per DP rank.
    return 1 if args.data_parallel_rank is not None or args.headless else args.data_parallel_size


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(asctime)s [%(name)s] %(message)s")
    pc = ParallelConfig(args.tensor_parallel_size, args.data_parallel_size, args.nnodes,
                        args.node_rank, args.master_port, args.distributed_executor_backend,
                        pipeline_parallel_size=args.pipeline_parallel_size,
                        enable_expert_parallel=args.enable_expert_parallel,
                        data_parallel_rank=args.data_parallel_rank, data_parallel_rpc_port=args.data_parallel_rpc_port,
                        all2all_backend=args.all2all_backend or "deepep_high_throughput",
                        kv_transfer_config=args.kv_transfer_config, moe=ParallelConfig.is_moe_model(args.model),
                        api_server_count=api_server_count(args))
    from vllmdiag_sim.vllm.entrypoints.openai import api_server

    if args.headless:
        api_server.run_headless(pc)
    elif pc.api_server_count > 1:
        from vllmdiag_sim.vllm.entrypoints.cli.serve import run_multi_api_server

        run_multi_api_server(pc, args.model, args.host, args.port)
    else:
        api_server.run_server(pc, args.model, args.host, args.port)
