# vllm_rbln/v1/attention/ops/triton_*.py: `tl.constexpr` in kernel signatures
class constexpr:
    pass
