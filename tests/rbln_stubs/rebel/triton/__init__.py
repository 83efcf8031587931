# vllm_rbln/v1/attention/ops/triton_*.py: `from rebel import triton`, `@triton.jit`
def jit(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)
