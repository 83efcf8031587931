"""Reliability tools: what hostile inputs and load cost, and that they never take a server down.

`hostile_inputs.py` (each bounded input class's worst case: time and peak memory in a fresh,
limited process) and `loadtest.py` (a bounded, seeded request mix against a running vLLM server,
used by tests/engine/test_load.py).
"""
