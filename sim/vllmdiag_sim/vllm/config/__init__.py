"""Mirror of vLLM module paths."""
