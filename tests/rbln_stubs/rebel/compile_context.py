from rebel import CompileContext  # noqa: F401
