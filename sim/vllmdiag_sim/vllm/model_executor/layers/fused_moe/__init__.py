"""Mirror of `vllm/model_executor/layers/fused_moe`: the MoE layer path of an expert-parallel step."""
