"""Mirror of the `deep_ep` package frames a DeepEP all2all shows (file names as in DeepEP), not DeepEP."""
