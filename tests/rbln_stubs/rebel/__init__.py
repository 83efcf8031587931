"""Import-only stand-in for the proprietary RBLN compiler (`rebel-compiler`)."""

__version__ = "0.12.0"


def get_npu_name(device_id: int = 0):
    return None


def manual_seed(seed: int) -> None:
    pass


class CompileContext:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("rebel stand-in: no RBLN compiler")


class Runtime:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("rebel stand-in: no RBLN runtime")


class RBLNCompiledModel:
    def __init__(self, *args, **kwargs):
        raise NotImplementedError("rebel stand-in: no RBLN compiler")
