"""Mirror of `vllm/v1/structured_output/__init__.py` (vLLM 0.33): `StructuredOutputManager`.

`grammar_init` runs on the EngineCore's input thread (`preprocess_add_request`) and submits
`_create_grammar` to a ThreadPoolExecutor created without a name prefix, as vLLM's is, so a py-spy
dump names the compiling thread "ThreadPoolExecutor-N_M". The request keeps the Future; the
scheduler leaves it waiting until the Future is done (WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR).
"""

from __future__ import annotations

import multiprocessing
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from vllmdiag_sim.vllm.v1.structured_output.backend_xgrammar import XgrammarBackend


class StructuredOutputManager:
    def __init__(self) -> None:
        self.backend: XgrammarBackend | None = None
        # vLLM: half the CPUs, since compiles are CPU-bound
        self.executor = ThreadPoolExecutor(max_workers=max(1, (multiprocessing.cpu_count() + 1) // 2))

    def grammar_init(self, request: dict[str, Any]) -> None:
        if not request.get("structured_outputs"):
            return
        if self.backend is None:
            self.backend = XgrammarBackend()
        request["grammar"] = self.executor.submit(self._create_grammar, request)

    def _create_grammar(self, request: dict[str, Any]) -> Any:
        request_type, grammar_spec = next(iter(request["structured_outputs"].items()))
        assert self.backend is not None
        return self.backend.compile_grammar(request_type, grammar_spec)


def is_grammar_ready(request: dict[str, Any]) -> bool:
    """vLLM's StructuredOutputRequest.is_grammar_ready: a request without a grammar is always ready."""
    grammar = request.get("grammar")
    return not isinstance(grammar, Future) or grammar.done()
