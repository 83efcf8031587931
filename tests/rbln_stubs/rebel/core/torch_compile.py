def rbln_backend(graph_module, example_inputs, **kwargs):
    raise NotImplementedError("rebel stand-in: no RBLN compiler")
