"""`vllm-specdec whatif`: what each draft-free method would buy on the operator's own traffic.

Layer 5 (beside `cli/`): it reads a traffic file (`inputs/traffic.py`), tokenizes it with the
model's own tokenizer (`tokens.py`), replays every request through the matcher vLLM runs
(`replay.py`: vLLM's n-gram matcher, arctic-inference's suffix tree, the adaptive proposer) and
prices the steps with one step-cost curve (`core/step_cost.py`: measured by a running engine, or
a prior from `core/roofline.py`) into predicted speedups per batch size (`core/speedup.py`).
"""
