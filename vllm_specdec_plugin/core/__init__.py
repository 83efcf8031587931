"""The pure core: typed inputs, the method table, the decision. No vLLM, no YAML, no I/O."""
