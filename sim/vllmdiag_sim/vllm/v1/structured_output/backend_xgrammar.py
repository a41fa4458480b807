"""Mirror of `vllm/v1/structured_output/backend_xgrammar.py`: `XgrammarBackend.compile_grammar`."""

from __future__ import annotations

from typing import Any

from vllmdiag_sim.xgrammar.compiler import GrammarCompiler


class XgrammarBackend:
    def __init__(self) -> None:
        self.compiler = GrammarCompiler()

    def compile_grammar(self, request_type: str, grammar_spec: str) -> Any:
        if request_type != "json":
            raise ValueError(f"the sim compiles JSON schemas only, not {request_type!r}")
        # vLLM 0.33: no timeout around JSON compiles (only regexes get compile_regex_with_timeout)
        return self.compiler.compile_json_schema(grammar_spec, any_whitespace=True, separators=None)
