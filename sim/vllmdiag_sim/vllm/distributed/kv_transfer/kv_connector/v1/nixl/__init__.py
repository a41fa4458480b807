"""Mirror of vLLM 0.33 module paths so py-spy frames match (function, file-suffix)."""
