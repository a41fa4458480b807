"""Mirror of `torch/cuda` paths."""
