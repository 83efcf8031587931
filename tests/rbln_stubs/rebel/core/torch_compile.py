# vllm_rbln/compilation/backends.py:24
def rbln_backend(graph_module, example_inputs, **kwargs):
    raise NotImplementedError("rbln_backend: rebel stand-in, no RBLN compiler")
