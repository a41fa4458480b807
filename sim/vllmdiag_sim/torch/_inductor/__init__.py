"""Mirror of `torch/_inductor` paths."""
