"""Mirror of the few torch frames a hung vLLM step shows (file suffixes as in torch), not torch."""
