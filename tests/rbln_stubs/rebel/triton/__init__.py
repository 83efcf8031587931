def jit(fn=None, **kwargs):
    return fn if fn is not None else (lambda f: f)
