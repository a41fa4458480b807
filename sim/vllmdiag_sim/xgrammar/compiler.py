"""Mirror of `xgrammar/compiler.py`: `GrammarCompiler.compile_json_schema`, the call vLLM's xgrammar
backend makes for every JSON-schema request (vllm/v1/structured_output/backend_xgrammar.py).

Compile time grows super-exponentially with oneOf/anyOf nesting and has no timeout (vLLM #54003): the
sim charges `BASE_S * GROWTH ** depth`, so depth 2 compiles in about a second and depth 10 never does.
The real compile is native code at 100 % CPU; the sim sleeps in short slices on one source line
instead (the test box is small and shared), which a py-spy dump without --native shows the same way:
this frame, at this line, look after look.
"""

from __future__ import annotations

import itertools
import json
import time
from typing import Any

from vllmdiag_sim import runtime

BASE_S = 0.03
GROWTH = 6.0
_COMPILES = itertools.count(1)


class CompiledGrammar:
    def __init__(self, schema: str) -> None:
        self.schema = schema


class GrammarCompiler:
    def compile_json_schema(self, schema: str, any_whitespace: bool = True, separators: Any = None) -> CompiledGrammar:
        cost_s = BASE_S * GROWTH ** nesting_depth(json.loads(schema))
        runtime.ack(f"grammar-compiling-{next(_COMPILES)}")  # the launcher waits for the n-th compile
        deadline = time.monotonic() + cost_s
        while time.monotonic() < deadline: time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))  # noqa: E701
        return CompiledGrammar(schema)


def nesting_depth(node: Any) -> int:
    """How deep oneOf/anyOf alternatives nest (what makes the real compile explode)."""
    if isinstance(node, dict):
        here = max((nesting_depth(v) for v in node.values()), default=0)
        alts = [nesting_depth(v) for k in ("oneOf", "anyOf") for v in node.get(k) or []]
        return max(here, 1 + max(alts, default=-1))
    if isinstance(node, list):
        return max((nesting_depth(v) for v in node), default=0)
    return 0
