"""Import-only stand-in for `rebel`, the proprietary RBLN compiler (rebel-compiler).

Carries the names vllm-rbln 0.12.0 and optimum-rbln 0.12.0 touch while their modules are
imported, plus `get_npu_name`, which answers "no NPU" so that
`RblnPlatform.get_device_name()` falls back to RBLN_FORCE_NPU_NAME / RBLN_TARGET_SOC.
Nothing here compiles or runs anything.
"""


def get_npu_name(device_id: int = 0):
    """No NPU on this host (vllm_rbln/platform/__init__.py:141)."""
    return None


class _Unavailable:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError(f"{type(self).__name__}: rebel stand-in, no RBLN compiler")


class CompileContext(_Unavailable):
    """vllm_rbln/compilation/compiler.py:22 (annotations), optimum-rbln."""


class Runtime(_Unavailable):
    """optimum/rbln/utils/runtime_utils.py:184 (annotation)."""


class RBLNCompiledModel(_Unavailable):
    """optimum/rbln/modeling_base.py:96 (annotation)."""
