"""Single-engine (or engine-free) probes: one part's cost, measured alone.

Each is a module with `main(argv)`, registered in `benchmarks/__main__.py`; those that need an
engine build it with `benchmarks/lib/engine_setup.py` (in process, so they can time or switch
vLLM's and the plugin's parts). Run them alone on the host: they compare parts and arms within
one engine, not configurations.
"""
