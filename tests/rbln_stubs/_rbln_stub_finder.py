"""Let `import torch.rbln` succeed where torch-rbln cannot load.

The real `torch.rbln` comes from torch-rbln, whose extension needs librbln.so from the
proprietary rebel-compiler. vllm-rbln imports it at module level
(vllm_rbln/v1/worker/dynamic_kv_sizer.py:28) and uses it only at run time. Like
torch-rbln, the stand-in names torch's PrivateUse1 backend "rbln", which the vllm model
path's default VLLM_RBLN_USE_DEVICE_TENSOR=1 needs for `DeviceConfig(device="rbln")`.
Appended to sys.meta_path, after the path finder, so a real torch/rbln still wins.
Loaded by the test venv's rbln_stubs.pth; imports nothing itself.
"""

import importlib.abc
import importlib.machinery
import sys


class _TorchRblnStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname == "torch.rbln":
            return importlib.machinery.ModuleSpec(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        import torch

        if torch._C._get_privateuse1_backend_name() == "privateuseone":
            torch.utils.rename_privateuse1_backend("rbln")


if not any(type(f).__name__ == "_TorchRblnStub" for f in sys.meta_path):
    sys.meta_path.append(_TorchRblnStub())
