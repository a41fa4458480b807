"""Mirror of `vllm/platforms/`: resolving the CUDA platform loads vLLM's compiled kernels."""
