# vllm_rbln/patches/deepseek_v2.py:16 imports rebel.ops.torch_custom_ops.attn
