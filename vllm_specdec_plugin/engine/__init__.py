"""The one vLLM boundary that changes vLLM: the patch mechanism, the fixes, the hook, metrics."""
