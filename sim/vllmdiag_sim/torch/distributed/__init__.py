"""Mirror of `torch/distributed`: the point-to-point calls a pipeline stage makes."""
