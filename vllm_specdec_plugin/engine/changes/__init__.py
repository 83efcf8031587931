"""The plugin's changes to vLLM, one module per vLLM area, each named for the module it
changes: vLLM's module path after `vllm.` (and `v1.`), dots as underscores
(`sample_rejection_sampler.py` changes `vllm.v1.sample.rejection_sampler`,
`worker_gpu_model_runner.py` `vllm.v1.worker.gpu_model_runner`; `metadata_distribution.py` the
`importlib.metadata` lookup vLLM's CLI makes). Each declares its `patching.Change` rows (name,
kind, targets, tested releases, apply function); `engine/registry.py` lists them in order.
Two modules are helpers, not areas: `probing.py` (the zero-draft shortcuts' counts and probe
inputs) and `sample_rejection_sampler_guard.py` (the sampling features known to be neutral).

Add a change: a module here (or a row in the area's existing module), its `Change`, one row in
`registry.CHANGES` (docs/architecture.md, "Add a change to vLLM").
"""
