# vllm_rbln/v1/attention/ops/triton_*.py:19 (used only inside kernels)
