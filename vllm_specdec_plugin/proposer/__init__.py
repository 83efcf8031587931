"""The plugin's own draft-free proposer, loaded through vLLM's `custom_class` method.

One concern a module, the way `vllm/v1/spec_decode/` keeps one proposer per module: `rows.py`
(which request a batch row holds), `candidates.py` (vLLM's n-gram matcher and the suffix tree),
`policy.py` (pure: acceptance and step cost -> draft lengths), `stats.py` (the statistics file)
and `proposer.py` (the class vLLM builds, with the interface in its docstring).
"""
