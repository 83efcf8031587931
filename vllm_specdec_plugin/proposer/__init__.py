"""The plugin's own draft-free proposer, loaded through vLLM's `custom_class` method.

One concern a module, the way `vllm/v1/spec_decode/` keeps one proposer per module: `state.py`
(what is remembered per request), `rows.py` (which request a batch row holds), `candidates.py`
(vLLM's n-gram matcher and the suffix tree), `acceptance.py` and `learning.py` (the acceptance
model and how it learns), `timing.py` (cycles into the step-cost table, `core/step_cost.py`),
`policy.py` and `control.py` (pure: the plan, the margin and dormancy), `stats.py` and
`trace.py` (the counters and the files), `params.py` (every tunable) and `proposer.py` (the thin
class vLLM builds, with the interface in its docstring).
"""
